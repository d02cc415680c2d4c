#!/bin/busybox sh
# /init of the NUMA test guests (tests/numa/test_numa_vm.py builds the
# initramfs: busybox, ft with its libraries, one model, this file).
#
# It reports the kernel's own accounts on the serial console, as lines
# starting with "@@", and powers off; the host test decides what they mean.
# Parameters come from the kernel command line, which passes unknown
# key=value words to init as environment variables:
#   ft_runs    what to run, e.g. "off,distribute,isolate:1,replicate": a
#              --numa mode, with :N for --numa-node N
#   ft_tokens  the prompt token ids for ft logits, comma-separated
#   ft_chat    1: every serve run answers one chat request with metrics
# For each run: the plan `ft info --hw` prints for it, the md5 of `ft logits` (and its exit status), then
# `ft serve` in the background, and once /health answers, every thread's
# name and Cpus_allowed_list (/proc/PID/task/*/status), the anonymous
# mappings of /proc/PID/numa_maps (weights are copied into anonymous
# memory placed by hwloc), and the chat response.
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /tmp
ip link set lo up
echo 0 >/proc/sys/kernel/printk 2>/dev/null

MODEL=/model.gguf
TOKENS=$(echo "$ft_tokens" | tr , ' ')
echo "@@uptime $(cut -d' ' -f1 /proc/uptime)"
for n in /sys/devices/system/node/node*; do
  echo "@@node ${n##*node} cpus=$(cat "$n/cpulist") mem_kb=$(awk '/MemTotal/ {print $4}' "$n/meminfo")"
done
echo "@@begin info"
ft info --hw 2>&1
echo "@@end info"

for run in $(echo "$ft_runs" | tr , ' '); do
  mode=${run%%:*}
  args="--numa $mode"
  [ "$run" != "$mode" ] && args="$args --numa-node ${run#*:}"
  echo "@@run $run"
  echo "@@begin plan"
  ft info --hw $args 2>&1 | sed -n '/^placement:/,$p'
  echo "@@end plan"
  ft logits -m $MODEL --tokens "$TOKENS" --top 8 $args >/tmp/logits 2>/tmp/logits.err
  rc=$?
  echo "@@logits rc=$rc md5=$(md5sum </tmp/logits | cut -d' ' -f1)"
  if [ $rc != 0 ]; then
    echo "@@begin stderr"; cat /tmp/logits.err; echo "@@end stderr"
    continue
  fi
  # -c 256: the default context would size the KV cache for the model's
  # whole training context, more than a small guest needs
  ft serve -m $MODEL $args -c 256 --port 8080 --enable-performance-metrics >/tmp/serve.log 2>&1 &
  pid=$!
  i=0
  until wget -q -O /dev/null http://127.0.0.1:8080/health 2>/dev/null; do
    i=$((i + 1))
    if [ $i -gt 600 ] || ! kill -0 $pid 2>/dev/null; then break; fi
    sleep 0.1
  done
  echo "@@serve ready=$i"
  echo "@@begin threads"
  for t in /proc/$pid/task/*; do
    echo "$(cat "$t/comm") $(awk '/^Cpus_allowed_list/ {print $2}' "$t/status")"
  done
  echo "@@end threads"
  echo "@@begin numa_maps"
  grep anon= /proc/$pid/numa_maps
  echo "@@end numa_maps"
  if [ "$ft_chat" = 1 ]; then
    echo "@@begin chat"
    wget -q -O - --header 'Content-Type: application/json' --post-data \
      '{"model": "model", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4, "temperature": 0}' \
      http://127.0.0.1:8080/v1/chat/completions 2>&1
    echo
    echo "@@end chat"
  fi
  kill $pid
  wait $pid
  echo "@@begin serve_log"; tail -5 /tmp/serve.log; echo "@@end serve_log"
done
echo "@@done $(cut -d' ' -f1 /proc/uptime)"
poweroff -f
