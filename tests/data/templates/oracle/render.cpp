// The oracle for tests/data/templates: renders one chat template with
// llama.cpp's own Jinja engine (common/jinja/*.cpp of the llama.cpp source
// node-llama-cpp 3.21.1 ships), building the context the way
// common_chat_templates_apply_jinja() and common_chat_template_direct_apply_impl()
// in common/chat.cpp build it:
//   - the template's capabilities come from jinja::caps_get();
//   - messages are normalized to string / typed content per the caps;
//   - "developer" becomes "system" unless the template is gpt-oss's (<|channel|>);
//   - a system message is merged into the next one when the template has no
//     system role; content "" is kept for tool-call messages; tool-call
//     arguments are parsed into objects when the template wants objects;
//   - the globals: messages, bos_token, eos_token, enable_thinking, tools (when
//     given), datetime / date_string, add_generation_prompt (only when true).
// The clock is fixed (FT_ORACLE_TIME, seconds since the epoch, run under TZ=UTC)
// so strftime_now() and the date strings are reproducible.
//
//   render TEMPLATE.jinja SCENARIO.json BOS EOS
// prints {"caps": {...}, "context": <the globals>, "output": "..."} or {..., "error": "..."}
// (caps: llama.cpp's jinja::caps of the template, which decide the fixes above).
// Built and run by tests/data/templates/generate.py; not part of FreeToken.
#include "jinja/caps.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"
#include "jinja/runtime.h"
#include "jinja/value.h"
#include "json.h"

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>

using json = common_json;

static std::string slurp(const char * path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

static std::string fmt_time(std::time_t t, const char * fmt) {
    char buf[64];
    std::strftime(buf, sizeof(buf), fmt, std::localtime(&t));
    return buf;
}

static json concat_parts(const json & parts) {
    std::string text;
    for (const auto & part : parts) {
        if (part.value("type", "") != "text") continue;
        if (!text.empty()) text += '\n';
        text += part.value("text", "");
    }
    return json(text);
}

int main(int argc, char ** argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: render TEMPLATE SCENARIO BOS EOS\n");
        return 2;
    }
    std::string src = slurp(argv[1]);
    json scen = json::parse(slurp(argv[2]));
    const char * tenv = getenv("FT_ORACLE_TIME");
    std::time_t now = tenv ? (std::time_t) atoll(tenv) : 0;

    json result = json::object();
    try {
        jinja::lexer lexer;
        auto lexer_res = lexer.tokenize(src);
        jinja::program prog = jinja::parse_from_tokens(lexer_res);
        jinja::caps caps = jinja::caps_get(prog);
        json jcaps = json::object();
        for (const auto & [k, v] : caps.to_map()) jcaps[k] = v;
        result["caps"] = jcaps;

        json messages = json::array();
        bool only_string = caps.supports_string_content && !caps.supports_typed_content;
        bool only_typed = !caps.supports_string_content && caps.supports_typed_content;
        for (const auto & m : scen.at("messages")) {
            json c = m;
            if (c.contains("content")) {
                if (only_typed && c.at("content").is_string()) {
                    json part = json::object();
                    part["type"] = "text";
                    part["text"] = c.at("content").get<std::string>();
                    json arr = json::array();
                    arr.push_back(part);
                    c["content"] = arr;
                } else if (only_string && c.at("content").is_array()) {
                    c["content"] = concat_parts(c.at("content"));
                }
            }
            messages.push_back(c);
        }
        if (lexer_res.source.find("<|channel|>") == std::string::npos) {
            for (size_t i = 0; i < messages.size(); i++)
                if (messages[i].contains("role") && messages[i]["role"] == "developer") messages[i]["role"] = "system";
        }
        if (!caps.supports_system_role && !messages.empty() && messages.front().at("role") == "system") {
            if (messages.size() > 1) {
                messages[1]["content"] =
                    messages[0].at("content").get<std::string>() + "\n" + messages[1].at("content").get<std::string>();
            }
            messages.erase((size_t) 0);
        }
        if (caps.supports_tool_calls) {
            for (size_t i = 0; i < messages.size(); i++)
                if (messages[i].contains("tool_calls") && !messages[i].contains("content")) messages[i]["content"] = "";
        }
        if (caps.supports_object_arguments) {
            for (size_t i = 0; i < messages.size(); i++) {
                if (!messages[i].contains("tool_calls")) continue;
                for (size_t j = 0; j < messages[i]["tool_calls"].size(); j++) {
                    json & fn = messages[i]["tool_calls"][j]["function"];
                    if (fn.contains("arguments") && fn["arguments"].is_string())
                        fn["arguments"] = json::parse(fn["arguments"].get<std::string>());
                }
            }
        }

        json inp = json::object();
        inp["messages"] = messages;
        inp["bos_token"] = std::string(argv[3]);
        inp["eos_token"] = std::string(argv[4]);
        inp["enable_thinking"] = true;
        if (scen.contains("tools")) inp["tools"] = scen.at("tools");
        inp["datetime"] = fmt_time(now, "%b %d %Y");
        inp["date_string"] = fmt_time(now, "%d %b %Y");
        if (scen.value("add_generation_prompt", json(false)) == true) inp["add_generation_prompt"] = true;
        result["context"] = inp;

        jinja::context ctx(lexer_res.source);
        ctx.current_time = now;
        jinja::global_from_json(ctx, inp, false);
        jinja::runtime runtime(ctx);
        const jinja::value out = runtime.execute(prog);
        auto parts = jinja::runtime::gather_string_parts(out);
        result["output"] = parts->as_string().str();
    } catch (const std::exception & e) {
        result["error"] = std::string(e.what());
    }
    std::cout << result.dump(1) << "\n";
    return 0;
}
