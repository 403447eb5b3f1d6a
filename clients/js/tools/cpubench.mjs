// CPU-time benchmark server for bench/bench_device.py --cpu: reads one JSON command per line
// on stdin, answers one JSON line. {"load": [{name, dir, epsilon}]} loads artefacts;
// {"run": name, "text": ..., "count": n} privatizes `text` n times and answers the CPU
// seconds (process.cpuUsage: user + system) and tokens. Node is single-threaded here, so
// CPU seconds are what the client costs per core.
import { readFile } from "node:fs/promises";
import path from "node:path";
import { createInterface } from "node:readline";
import { activeKernels, loadArtefact, Privatizer, useKernels } from "../src/deniable.js";

const privs = new Map();
for await (const line of createInterface({ input: process.stdin })) {
  const cmd = JSON.parse(line);
  let answer = {};
  if (cmd.kernels) answer.kernels = useKernels(cmd.kernels);
  if (cmd.load) {
    for (const c of cmd.load) {
      const a = await loadArtefact((n) => readFile(path.join(c.dir, n)));
      privs.set(c.name, new Privatizer(a, { epsilon: c.epsilon }));
    }
    answer = { ...answer, kernels: activeKernels() };
  }
  if (cmd.run) {
    const p = privs.get(cmd.run);
    let tokens = 0;
    const t0 = process.cpuUsage();
    for (let i = 0; i < cmd.count; i++) tokens += (await p.privatize(cmd.text)).tokens;
    const c = process.cpuUsage(t0);
    answer = { cpu_s: (c.user + c.system) / 1e6, tokens };
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
}
