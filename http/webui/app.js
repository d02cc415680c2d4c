// FreeToken web UI (http/webui.h): the chat page (/) and the live view
// (/dashboard). No libraries and no inline code (the page's CSP forbids
// it). Everything the server or the model says is put on the page with
// textContent, never parsed as HTML.
'use strict';

(() => {
  const $ = (sel) => document.querySelector(sel);

  // ---- elements, formatting ------------------------------------------------

  // el('p', {className: 'x'}, 'text', child): an element whose string
  // children become text nodes.
  function el(tag, props, ...kids) {
    const e = document.createElement(tag);
    Object.assign(e, props || {});
    for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
    return e;
  }

  const num = (v) => (typeof v === 'number' && Number.isFinite(v) ? v : null);

  function fmtMs(v) {
    v = num(v);
    if (v === null) return '–';
    if (v >= 10000) return (v / 1000).toFixed(1) + ' s';
    if (v >= 1000) return (v / 1000).toFixed(2) + ' s';
    return v.toFixed(v >= 100 ? 0 : v >= 1 || v === 0 ? 1 : 2) + ' ms';
  }

  function fmtRate(v) {
    v = num(v);
    return v === null ? '–' : v.toFixed(v >= 100 ? 0 : 1);
  }

  // ---- the API key ---------------------------------------------------------
  // Kept for this tab (sessionStorage), or on this device (localStorage)
  // when the user ticks "Remember"; sent only to this origin.

  const KEY = 'ft-api-key';
  const getKey = () => sessionStorage.getItem(KEY) || localStorage.getItem(KEY) || '';

  function setKey(key, remember) {
    sessionStorage.removeItem(KEY);
    localStorage.removeItem(KEY);
    if (key) (remember ? localStorage : sessionStorage).setItem(KEY, key);
  }

  function headers(extra) {
    const h = Object.assign({}, extra);
    const k = getKey();
    if (k) h.Authorization = 'Bearer ' + k;
    return h;
  }

  // The message of an OpenAI error body, or the status line.
  async function errorText(resp) {
    try {
      const j = await resp.json();
      if (j && j.error && typeof j.error.message === 'string') return j.error.message;
    } catch (_) { /* not JSON */ }
    return `HTTP ${resp.status} ${resp.statusText}`;
  }

  // The API key dialog; onSaved runs after the user saves a key.
  function keyDialog(onSaved) {
    const dlg = $('#key-dialog'), input = $('#key'), remember = $('#key-remember'), why = $('#key-why');
    const defaultWhy = why.textContent;
    let opener = null;
    function open(reason) {
      why.textContent = reason || defaultWhy;
      input.value = getKey();
      remember.checked = !!localStorage.getItem(KEY);
      opener = document.activeElement;
      if (!dlg.open) dlg.showModal();
      input.focus();
    }
    function close() {
      dlg.close();
      if (opener && opener.focus) opener.focus();
    }
    $('#key-form').addEventListener('submit', (e) => {
      e.preventDefault();
      setKey(input.value.trim(), remember.checked);
      close();
      onSaved();
    });
    $('#key-cancel').addEventListener('click', close);
    $('#key-btn').addEventListener('click', () => open());
    return open;
  }

  async function showModel(askKey) {
    try {
      const r = await fetch('/v1/models', { headers: headers() });
      if (r.status === 401) {
        askKey('This server requires an API key: ' + (await errorText(r)));
        return;
      }
      if (!r.ok) return;
      const j = await r.json();
      const id = j && Array.isArray(j.data) && j.data[0] && j.data[0].id;
      if (typeof id === 'string') $('#model').textContent = id;
    } catch (_) { /* the server is not reachable; the next action says so */ }
  }

  // The events of a server-sent-events response, one data string each.
  async function* sseEvents(resp) {
    const reader = resp.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true }).replace(/\r\n/g, '\n');
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        const data = block.split('\n').filter((l) => l.startsWith('data:'))
          .map((l) => l.slice(5).replace(/^ /, '')).join('\n');
        if (data) yield data;
      }
    }
  }

  // ---- the chat page -------------------------------------------------------

  const SETTINGS = ['system', 'temperature', 'top_p', 'top_k', 'min_p', 'max_tokens', 'seed'];
  const SETTINGS_KEY = 'ft-chat-settings';

  function initChat() {
    const log = $('#log'), form = $('#composer'), msg = $('#msg'), send = $('#send'), stop = $('#stop');
    const errorEl = $('#error'), settings = $('#settings');
    let history = []; // {role, content} of the conversation, without the system prompt
    let controller = null; // the running request's AbortController

    if (window.matchMedia('(min-width: 60rem)').matches) settings.open = true;
    restoreSettings();
    for (const id of SETTINGS) $('#' + id).addEventListener('change', saveSettings);

    const askKey = keyDialog(() => showModel(askKey));
    showModel(askKey);

    msg.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        form.requestSubmit();
      } else if (e.key === 'Escape' && controller) {
        controller.abort();
      }
    });
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const text = msg.value;
      if (!text.trim() || controller) return;
      msg.value = '';
      chat(text);
    });
    stop.addEventListener('click', () => controller && controller.abort());
    $('#new-chat').addEventListener('click', () => {
      if (controller) controller.abort();
      history = [];
      log.replaceChildren();
      showError('');
      msg.focus();
    });

    function restoreSettings() {
      let saved = null;
      try { saved = JSON.parse(localStorage.getItem(SETTINGS_KEY) || 'null'); } catch (_) { /* ignore */ }
      if (!saved || typeof saved !== 'object') return;
      for (const id of SETTINGS) if (typeof saved[id] === 'string') $('#' + id).value = saved[id];
    }

    function saveSettings() {
      const o = {};
      for (const id of SETTINGS) o[id] = $('#' + id).value;
      localStorage.setItem(SETTINGS_KEY, JSON.stringify(o));
    }

    function showError(text) {
      errorEl.textContent = text;
      errorEl.hidden = !text;
    }

    function setBusy(busy) {
      send.disabled = busy;
      stop.hidden = !busy;
      log.setAttribute('aria-busy', busy ? 'true' : 'false');
    }

    // Follow the reply as it grows, unless the user scrolled up to read.
    function nearBottom() {
      const d = document.scrollingElement;
      return d.scrollHeight - d.scrollTop - d.clientHeight < 80;
    }
    function toBottom() { form.scrollIntoView({ block: 'end' }); }

    // The request's sampling fields: empty ones are left to the server.
    function sampling() {
      const o = {};
      for (const id of ['temperature', 'top_p', 'top_k', 'min_p', 'max_tokens', 'seed']) {
        const v = $('#' + id).value.trim();
        if (v !== '') o[id] = Number(v);
      }
      return o;
    }

    function message(role, text) {
      const who = role === 'user' ? 'You' : ($('#model').textContent || 'Model');
      return el('article', { className: 'msg ' + role },
        el('p', { className: 'who' }, who), el('div', { className: 'text' }, text));
    }

    async function chat(text) {
      showError('');
      const conversation = history; // New chat replaces it: a late reply must not land in the new one
      history.push({ role: 'user', content: text });
      log.append(message('user', text));
      const reply = message('assistant', '');
      reply.classList.add('streaming');
      const textEl = reply.querySelector('.text');
      log.append(reply);
      toBottom();

      const system = $('#system').value.trim();
      const messages = (system ? [{ role: 'system', content: system }] : []).concat(history);
      const body = Object.assign({
        messages, stream: true, stream_options: { include_usage: true }, performance_metrics: true,
      }, sampling());

      controller = new AbortController();
      setBusy(true);
      let content = '', last = null, failed = '', stopped = false;
      try {
        const resp = await fetch('/v1/chat/completions', {
          method: 'POST', headers: headers({ 'Content-Type': 'application/json' }),
          body: JSON.stringify(body), signal: controller.signal,
        });
        if (!resp.ok) {
          failed = await errorText(resp);
          if (resp.status === 401) askKey('This server requires an API key: ' + failed);
        } else {
          for await (const data of sseEvents(resp)) {
            if (data === '[DONE]') break;
            const ev = JSON.parse(data);
            if (ev.error) {
              failed = typeof ev.error.message === 'string' ? ev.error.message : 'the server reported an error';
              break;
            }
            const delta = ev.choices && ev.choices[0] && ev.choices[0].delta;
            if (delta && typeof delta.content === 'string' && delta.content) {
              const follow = nearBottom();
              content += delta.content;
              textEl.textContent = content.trimStart(); // models often open with blank lines
              if (follow) toBottom();
            }
            if (ev.metrics || ev.usage) last = ev;
          }
        }
      } catch (e) {
        if (e && e.name === 'AbortError') stopped = true;
        else failed = 'the request failed: ' + (e && e.message ? e.message : String(e));
      } finally {
        controller = null;
        setBusy(false);
        reply.classList.remove('streaming');
      }
      if (content) {
        conversation.push({ role: 'assistant', content });
      } else {
        // Nothing came back: take the question out and give it back to send again.
        conversation.pop();
        if (conversation === history && !msg.value) msg.value = text;
        textEl.textContent = stopped ? '(stopped)' : failed ? '(no answer)' : '(empty answer)';
      }
      if (failed) showError(failed);
      reply.append(metricsLine(last, stopped));
      msg.focus();
    }

    // The engine's numbers for this reply (README, Per-request performance metrics).
    function metricsLine(ev, stopped) {
      const p = el('p', { className: 'metrics' });
      const m = ev && ev.metrics;
      if (!m) {
        p.classList.add('note');
        p.textContent = stopped ? 'Stopped: no metrics for an unfinished request.' : 'No metrics in this answer.';
        return p;
      }
      const itl = m.inter_token_latency_ms || {};
      const prompt = ev.usage ? num(ev.usage.prompt_tokens) : null;
      const item = (k, label, title, value) => {
        const s = el('span', {}, title ? el('abbr', { title }, label) : label, ' ', el('b', {}, value));
        s.dataset.k = k;
        return s;
      };
      p.append(
        item('ttft', 'TTFT', 'time to first token', fmtMs(m.ttft_ms)),
        item('queue', 'queue', '', fmtMs(m.queue_time_ms)),
        item('prefill', 'prefill', '', fmtRate(m.prefill_tokens_per_second) + ' tok/s'),
        item('decode', 'decode', '', fmtRate(m.decode_tokens_per_second) + ' tok/s'),
        item('cached', 'cached', 'prompt tokens whose KV came from the prefix cache',
          `${num(m.cached_prompt_tokens) ?? '–'} of ${prompt ?? '–'}`),
        item('itl', 'ITL', 'inter-token latency', `p50 ${fmtMs(itl.p50)} · p99 ${fmtMs(itl.p99)}`),
      );
      if (ev.usage) p.append(item('tokens', 'tokens', 'generated tokens', String(num(ev.usage.completion_tokens) ?? '–')));
      return p;
    }
  }

  // ---- the live view -------------------------------------------------------

  const WINDOW_S = 300; // the charts' time span
  const TABLE_ROWS = 50;
  const POLL_MS = 1000;
  const RATE_WINDOW_S = 10; // server-wide tokens/s over this long

  function initDashboard() {
    const state = {
      capacity: 0, // the ring's, from the first answer
      since: 0, // seq of the newest entry seen
      reqs: [], // entries of the last WINDOW_S, oldest first (charts)
      recent: [], // the newest TABLE_ROWS entries, newest first (table)
      samples: [], // {t, running, waiting, kv, tokens} per poll
      paused: false,
      needKey: false,
      timer: 0,
    };
    const status = $('#status'), pause = $('#pause');
    const askKey = keyDialog(() => { state.needKey = false; showModel(askKey); poll(); });
    showModel(askKey);

    pause.addEventListener('click', () => {
      state.paused = !state.paused;
      pause.setAttribute('aria-pressed', String(state.paused));
      pause.textContent = state.paused ? 'Resume' : 'Pause';
      if (state.paused) setStatus('Paused.');
      else poll();
    });
    document.addEventListener('visibilitychange', () => { if (!document.hidden) poll(); });
    if (window.ResizeObserver) new ResizeObserver(draw).observe($('.charts'));
    poll();

    function setStatus(text, bad) {
      status.textContent = text;
      status.classList.toggle('bad', !!bad);
    }

    function schedule(ms) {
      clearTimeout(state.timer);
      if (!state.paused && !state.needKey) state.timer = setTimeout(poll, ms);
    }

    async function poll() {
      clearTimeout(state.timer);
      if (state.paused || state.needKey || document.hidden) return;
      const q = state.capacity ? `?limit=${state.capacity}&since=${state.since}` : '';
      let j;
      try {
        const r = await fetch('/v1/requests/recent' + q, { headers: headers() });
        if (r.status === 401) {
          state.needKey = true;
          setStatus('This server requires an API key.', true);
          askKey('This server requires an API key: ' + (await errorText(r)));
          return;
        }
        if (!r.ok) throw new Error(await errorText(r));
        j = await r.json();
        if (state.paused) return; // paused while the answer was on its way
      } catch (e) {
        setStatus('Server unreachable (' + (e && e.message ? e.message : e) + '); retrying.', true);
        schedule(POLL_MS * 3);
        return;
      }
      if (!state.capacity) {
        // The first answer tells the ring's size: ask again for all of it.
        state.capacity = num(j.capacity) || TABLE_ROWS;
        poll();
        return;
      }
      update(j);
      schedule(POLL_MS);
    }

    function update(j) {
      const now = num(j.time) || Date.now() / 1000;
      if (num(j.recorded) !== null && j.recorded < state.since) {
        // A new server process: start over.
        state.since = 0;
        state.reqs = [];
        state.recent = [];
        state.samples = [];
      }
      const fresh = (Array.isArray(j.data) ? j.data : []).filter((e) => e && num(e.seq) !== null && e.seq > state.since);
      if (fresh.length) state.since = Math.max(...fresh.map((e) => e.seq));
      const oldestFirst = fresh.slice().reverse();
      state.reqs.push(...oldestFirst);
      state.reqs = state.reqs.filter((e) => num(e.finished_at) !== null && e.finished_at >= now - WINDOW_S);
      state.recent = fresh.concat(state.recent).slice(0, TABLE_ROWS);

      const g = j.gauges || {};
      state.samples.push({
        t: now, running: num(g.running), waiting: num(g.waiting), kv: num(g.kv_cache_usage),
        tokens: num(j.completion_tokens_total),
      });
      state.samples = state.samples.filter((s) => s.t >= now - WINDOW_S);
      const tps = rate(state.samples);
      state.samples[state.samples.length - 1].tps = tps;

      if (typeof j.model === 'string' && j.model) $('#model').textContent = j.model;
      $('#g-running').textContent = g.loaded ? String(g.running) : '–';
      $('#g-waiting').textContent = g.loaded ? String(g.waiting) : '–';
      $('#g-kv').textContent = g.loaded && num(g.kv_cache_usage) !== null ? (100 * g.kv_cache_usage).toFixed(1) + ' %' : '–';
      $('#g-kv-meter').value = num(g.kv_cache_usage) || 0;
      $('#g-tps').textContent = tps === null ? '–' : fmtRate(tps);
      $('#g-total').textContent = num(j.recorded) === null ? '–' : String(j.recorded);
      $('#g-conns').textContent = num(g.connections) === null ? '–' : String(g.connections);
      setStatus(g.loaded ? `Live: updated ${new Date(now * 1000).toLocaleTimeString()}.`
        : 'The model is still loading.');
      state.now = now;
      table();
      draw();
    }

    // Tokens/s over the last RATE_WINDOW_S from the server's running total
    // of generated tokens (counted as requests finish).
    function rate(samples) {
      const last = samples[samples.length - 1];
      if (!last || last.tokens === null) return null;
      let first = null;
      for (const s of samples) {
        if (s.tokens !== null && last.t - s.t <= RATE_WINDOW_S) { first = s; break; }
      }
      if (!first || last.t - first.t < 1) return null;
      return Math.max(0, (last.tokens - first.tokens) / (last.t - first.t));
    }

    // "/v1/chat/completions" as "chat", the whole path in its title.
    function endpointCell(path) {
      const short = { '/v1/chat/completions': 'chat', '/v1/completions': 'completions', '/v1/embeddings': 'embeddings' };
      return el('td', { title: path }, short[path] || path);
    }

    function table() {
      const rows = state.recent.map((e) => {
        const m = e.metrics || {};
        const itl = m.inter_token_latency_ms || {};
        const cell = (v, cls) => el('td', cls ? { className: cls } : {}, v);
        const tr = el('tr', {},
          cell(num(e.finished_at) === null ? '–' : new Date(e.finished_at * 1000).toLocaleTimeString()),
          cell(String(e.id || '–'), 'id'),
          endpointCell(String(e.endpoint || '')),
          cell(String(e.status)),
          cell(String(e.finish_reason || '')),
          cell(`${num(e.prompt_tokens) ?? '–'} (${num(m.cached_prompt_tokens) ?? '–'})`, 'num'),
          cell(String(num(e.completion_tokens) ?? '–'), 'num'),
          cell(fmtMs(m.queue_time_ms), 'num'),
          cell(fmtMs(m.ttft_ms), 'num'),
          cell(fmtRate(m.prefill_tokens_per_second), 'num'),
          cell(fmtRate(m.decode_tokens_per_second), 'num'),
          cell(fmtMs(itl.p50), 'num'),
          cell(fmtMs(itl.p99), 'num'),
          cell(fmtMs(m.total_time_ms), 'num'));
        if (e.status !== 200) tr.className = 'failed';
        return tr;
      });
      $('#recent-rows').replaceChildren(...rows);
      $('#recent-empty').hidden = rows.length > 0;
    }

    function draw() {
      if (!state.now) return;
      const t1 = state.now, t0 = t1 - WINDOW_S;
      const rq = (f) => state.reqs.map((e) => [e.finished_at, f(e.metrics || {})]).filter((p) => num(p[1]) !== null);
      const sm = (k) => state.samples.map((s) => [s.t, s[k]]).filter((p) => num(p[1]) !== null);
      chart('#c-ttft', 'Time to first token', t0, t1, fmtMs, [{ pts: rq((m) => m.ttft_ms), c: '--c1', dots: true }]);
      chart('#c-itl', 'Inter-token latency', t0, t1, fmtMs, [
        { pts: rq((m) => (m.inter_token_latency_ms || {}).p50), c: '--c1', dots: true },
        { pts: rq((m) => (m.inter_token_latency_ms || {}).p99), c: '--c2', dots: true }]);
      chart('#c-queue', 'Queue time', t0, t1, fmtMs, [{ pts: rq((m) => m.queue_time_ms), c: '--c1', dots: true }]);
      chart('#c-tps', 'Generated tokens per second', t0, t1, fmtRate, [
        { pts: sm('tps'), c: '--c1' },
        { pts: rq((m) => m.decode_tokens_per_second), c: '--c2', dots: true }]);
      chart('#c-sched', 'Running and waiting requests', t0, t1, (v) => v.toFixed(0), [
        { pts: sm('running'), c: '--c1' }, { pts: sm('waiting'), c: '--c2' }], 2);
      chart('#c-kv', 'KV cache use', t0, t1, (v) => v.toFixed(0) + ' %',
        [{ pts: sm('kv').map((p) => [p[0], 100 * p[1]]), c: '--c1' }], 100);
    }
  }

  // A time chart on a canvas: series of [t, value] from t0 to t1, lines
  // or dots, the y axis from 0 to a rounded maximum (at least minMax).
  function chart(sel, name, t0, t1, fmt, series, minMax) {
    const cv = $(sel);
    const w = cv.clientWidth, h = cv.clientHeight;
    if (!w || !h) return;
    const dpr = window.devicePixelRatio || 1;
    if (cv.width !== Math.round(w * dpr) || cv.height !== Math.round(h * dpr)) {
      cv.width = Math.round(w * dpr);
      cv.height = Math.round(h * dpr);
    }
    const ctx = cv.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const css = getComputedStyle(document.documentElement);
    const color = (v) => css.getPropertyValue(v).trim();
    const inWin = series.map((s) => s.pts.filter((p) => p[0] >= t0 && p[0] <= t1));
    let max = Math.max(minMax || 0, ...inWin.flat().map((p) => p[1]));
    max = niceCeil(max || 1);
    const L = 56, R = 8, T = 8, B = 20;
    const x = (t) => L + ((t - t0) / (t1 - t0)) * (w - L - R);
    const y = (v) => T + (1 - v / max) * (h - T - B);

    ctx.font = '11px system-ui, sans-serif';
    ctx.lineWidth = 1;
    ctx.strokeStyle = color('--grid');
    ctx.fillStyle = color('--muted');
    ctx.textBaseline = 'middle';
    ctx.textAlign = 'right';
    for (const f of [0, 0.5, 1]) {
      const yy = Math.round(y(max * f)) + 0.5;
      ctx.beginPath(); ctx.moveTo(L, yy); ctx.lineTo(w - R, yy); ctx.stroke();
      ctx.fillText(fmt(max * f), L - 6, yy);
    }
    ctx.textBaseline = 'alphabetic';
    ctx.textAlign = 'left';
    ctx.fillText('−5 min', L, h - 4);
    ctx.textAlign = 'right';
    ctx.fillText('now', w - R, h - 4);

    let total = 0;
    inWin.forEach((pts, i) => {
      const s = series[i];
      total += pts.length;
      ctx.strokeStyle = ctx.fillStyle = color(s.c);
      ctx.lineWidth = 1.5;
      if (!s.dots && pts.length) {
        ctx.beginPath();
        pts.forEach((p, k) => (k ? ctx.lineTo(x(p[0]), y(p[1])) : ctx.moveTo(x(p[0]), y(p[1]))));
        ctx.stroke();
      }
      if (s.dots) {
        for (const p of pts) {
          ctx.beginPath(); ctx.arc(x(p[0]), y(p[1]), 2.5, 0, 2 * Math.PI); ctx.fill();
        }
      }
    });
    if (!total) {
      ctx.fillStyle = color('--muted');
      ctx.textAlign = 'center';
      ctx.fillText('no data in the last 5 minutes', (L + w - R) / 2, h / 2);
    }
    const latest = inWin.map((pts) => (pts.length ? fmt(pts[pts.length - 1][1]) : '–')).join(' / ');
    cv.setAttribute('aria-label', total ? `${name}, last 5 minutes: latest ${latest}` : `${name}: no data in the last 5 minutes`);
  }

  // 1, 2 or 5 times a power of ten, at least v.
  function niceCeil(v) {
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  const page = document.body.dataset.page;
  if (page === 'chat') initChat();
  else if (page === 'dashboard') initDashboard();
})();
