// The benchmark body shared by Node and Chromium (bench/bench_device.py drives both).
// runBench(configs, {text, rounds}): for each config {name, source, epsilon, mode, decodeUrl,
// artefactId}: first-load time (fetch/read + SHA-256 + parse), then `rounds` interleaved
// rounds privatizing `text`; returns per config {load_ms, ms: [...]} (one number per round).
import { loadArtefact, Privatizer } from "../src/deniable.js";

export async function runBench(configs, { text, rounds }) {
  const out = {};
  const privs = [];
  for (const c of configs) {
    const t0 = performance.now();
    const a = await loadArtefact(c.source);
    const load = performance.now() - t0;
    const p = new Privatizer(a, { epsilon: c.epsilon, mode: c.mode ?? "local", decodeUrl: c.decodeUrl, artefactId: c.artefactId });
    await p.privatize(text); // warm-up (JIT)
    out[c.name] = { load_ms: load, ms: [], tokens: (await p.privatize(text)).tokens };
    privs.push([c.name, p]);
  }
  for (let r = 0; r < rounds; r++) {
    for (const [name, p] of privs) {
      const t0 = performance.now();
      await p.privatize(text);
      out[name].ms.push(performance.now() - t0);
    }
  }
  return out;
}

// Node: node bench.mjs '<json>' where each source is a folder
if (typeof process !== "undefined" && process.argv[1] && import.meta.url.endsWith(process.argv[1].split("/").pop())) {
  const { readFile } = await import("node:fs/promises");
  const path = await import("node:path");
  const spec = JSON.parse(process.argv[2]);
  for (const c of spec.configs) {
    const dir = c.source;
    if (!/^https?:/.test(dir)) c.source = (n) => readFile(path.join(dir, n));
  }
  process.stdout.write(JSON.stringify(await runBench(spec.configs, spec)) + "\n");
}
