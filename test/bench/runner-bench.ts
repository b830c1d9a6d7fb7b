// `npm run bench:runner`: the runner beside references measured in the same run, printed as
// ratios (these machines are shared and noisy; absolute numbers mean little).
//   (a) kill latency: deadline -> runner returned with the whole tree dead, vs GNU `timeout -s KILL`
//   (b) per-task overhead over 1000 trivial tasks, vs a bare `sh -c true` spawn
//   (c) stdout throughput of a task printing 1 GiB through the runner, vs a raw pipe read by Node
import { spawn, spawnSync } from "node:child_process";
import { appendFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { Writable } from "node:stream";
import { LOCAL_DEFAULTS, resolveLimits } from "../../src/api/limits.js";
import { type PlaybookSpec, PlaybookSpecSchema } from "../../src/api/playbook.js";
import { runPlaybook } from "../../src/pod-runner/run.js";

// Orphans of the killed trees (here and under GNU timeout) must be reaped promptly, as tini does
// as a pod's PID 1 (see the Dockerfile): where this machine's PID 1 reaps lazily, zombies pile up
// by the hundred and every /proc look of the runner reads them. So the benchmark runs itself under
// `tini -s` (a subreaper) when it can, and says so.
const REAPED_VAR = "PLAYBOOK_BENCH_UNDER_TINI";
if (process.env[REAPED_VAR] === undefined && spawnSync("tini", ["--version"]).status === 0) {
  const rerun = spawnSync("tini", ["-s", "--", process.execPath, ...process.argv.slice(1)], {
    stdio: "inherit",
    env: { ...process.env, [REAPED_VAR]: "1" },
  });
  process.exit(rerun.status ?? 1);
}
const reaper =
  process.env[REAPED_VAR] === undefined
    ? "PID 1 (tini not found: on machines whose PID 1 reaps lazily, install it, e.g. apt-get install tini)"
    : "tini -s";

const args = new Map(process.argv.slice(2).map((a) => a.replace(/^--/, "").split("=") as [string, string]));
const quick = args.has("quick");
const KILL_ROUNDS = Number(args.get("kill-rounds") ?? (quick ? 10 : 100));
const TASKS = Number(args.get("tasks") ?? (quick ? 200 : 1000));
const BYTES = Number(args.get("bytes") ?? (quick ? 128 : 1024)) * 1024 * 1024;
const DEADLINE_MS = 300;
// `npm run bench` folds these results into its own: each section appends its comparisons here,
// one JSON object a line, in the shape of test/bench/results.ts.
const RESULTS_FILE = args.get("results-file");

function record(comparison: {
  name: string;
  ours: number;
  reference: number;
  unit: string;
  ratio: number;
  target: string;
  note: string;
}): void {
  if (RESULTS_FILE) appendFileSync(RESULTS_FILE, `${JSON.stringify(comparison)}\n`);
}

function discard(): Writable & { bytes: number } {
  const sink = new Writable({
    highWaterMark: 1 << 16,
    write(chunk: Buffer, _e, callback) {
      sink.bytes += chunk.length;
      callback();
    },
  }) as Writable & { bytes: number };
  sink.bytes = 0;
  return sink;
}

async function runTasks(spec: object): Promise<number> {
  const parsed: PlaybookSpec = PlaybookSpecSchema.parse(spec);
  const started = performance.now();
  // The discard sink is done with a chunk when it calls back, as the runner's stdout is.
  await runPlaybook({
    tasks: parsed.tasks,
    limits: resolveLimits(parsed, LOCAL_DEFAULTS),
    sink: discard(),
    recycleOutput: true,
  });
  return performance.now() - started;
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] as number;
}

function tree(size: number): string {
  // `size` processes that each hold the output pipe, plus the shell that started them.
  return `i=1; while [ $i -lt ${size} ]; do sleep 60 & i=$((i+1)); done; echo ready; sleep 60`;
}

function timeGnuTimeout(size: number): Promise<number> {
  return new Promise((resolve) => {
    const started = performance.now();
    const child = spawn("timeout", ["-s", "KILL", `${DEADLINE_MS / 1000}`, "sh", "-c", tree(size)], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stdout.resume();
    child.stderr.resume();
    // "close" comes once every holder of the pipes is gone: the whole tree is dead.
    child.on("close", () => resolve(performance.now() - started - DEADLINE_MS));
  });
}

async function timeRunner(size: number): Promise<number> {
  const elapsed = await runTasks({
    killGrace: "0s",
    tasks: [{ name: "tree", timeout: `${DEADLINE_MS}ms`, run: tree(size) }],
  });
  return elapsed - DEADLINE_MS;
}

function spawnBare(): Promise<void> {
  return new Promise((resolve) => {
    const child = spawn("sh", ["-c", "true"], { stdio: ["ignore", "pipe", "pipe"] });
    child.stdout.resume();
    child.stderr.resume();
    child.on("close", () => resolve());
  });
}

function rawPipe(bytes: number, command: string): Promise<number> {
  return new Promise((resolve) => {
    const started = performance.now();
    const child = spawn("sh", ["-c", command], { stdio: ["ignore", "pipe", "inherit"] });
    let seen = 0;
    child.stdout.on("data", (chunk: Buffer) => {
      seen += chunk.length;
    });
    child.on("close", () => {
      if (seen < bytes) throw new Error(`raw pipe saw ${seen} bytes`);
      resolve(performance.now() - started);
    });
  });
}

const fmt = (ms: number) => `${ms.toFixed(1)} ms`;
const median = (values: number[]) => percentile(values, 50);

/** (a) kill latency, interleaved so both see the same machine load. */
async function killLatency(): Promise<void> {
  for (const size of [1, 10, 100]) {
    const gnu: number[] = [];
    const ours: number[] = [];
    for (let round = 0; round < KILL_ROUNDS; round++) {
      gnu.push(await timeGnuTimeout(size));
      ours.push(await timeRunner(size));
    }
    const ratio = percentile(ours, 99) / percentile(gnu, 99);
    record({
      name: `kill_latency_p99_${size}procs`,
      ours: percentile(ours, 99),
      reference: percentile(gnu, 99),
      unit: "ms",
      ratio,
      target: "<= 1.2",
      note: `deadline to the whole tree dead, against GNU timeout -s KILL; ${KILL_ROUNDS} rounds each, interleaved`,
    });
    console.log(
      `(a) kill latency, tree of ${String(size).padStart(3)}: runner p50 ${fmt(percentile(ours, 50))} p99 ${fmt(percentile(ours, 99))}; ` +
        `timeout -s KILL p50 ${fmt(percentile(gnu, 50))} p99 ${fmt(percentile(gnu, 99))}; p99 ratio ${ratio.toFixed(2)}x (target <= 1.2x)`,
    );
  }
}

/**
 * (b) per-task overhead: rounds of `perRound` tasks, each beside the same number of bare spawns,
 * so both see the same machine load; the median round's ratio is reported.
 */
async function perTask(): Promise<void> {
  const rounds = quick ? 3 : 10;
  const perRound = Math.min(200, Math.max(1, Math.floor(TASKS / rounds)));
  const tasks = Array.from({ length: perRound }, (_, i) => ({ name: `t${i}`, run: "true" }));
  await runTasks({ tasks: tasks.slice(0, 20) }); // warm up
  const bare: number[] = [];
  const ours: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const bareStart = performance.now();
    for (let i = 0; i < perRound; i++) await spawnBare();
    bare.push((performance.now() - bareStart) / perRound);
    ours.push((await runTasks({ tasks })) / perRound);
  }
  const ratio = median(ours.map((value, i) => value / (bare[i] as number)));
  record({
    name: "task_overhead",
    ours: median(ours),
    reference: median(bare),
    unit: "ms/task",
    ratio,
    target: "<= 1.25",
    note: `${rounds * perRound} trivial tasks against as many bare sh -c spawns; median of the rounds' ratios`,
  });
  console.log(
    `(b) per task over ${rounds * perRound} trivial tasks: runner median ${fmt(median(ours))}, bare sh -c spawn ${fmt(median(bare))}; ` +
      `median ratio ${ratio.toFixed(2)}x (target <= 1.25x)`,
  );
}

/** (c) throughput, for output without newlines and for 100-byte lines; 5 interleaved rounds. */
async function throughput(): Promise<void> {
  for (const [label, command] of [
    ["no newlines", `head -c ${BYTES} /dev/zero`],
    ["100-byte lines", `yes '${"x".repeat(99)}' | head -c ${BYTES}`],
  ] as const) {
    const raw: number[] = [];
    const ours: number[] = [];
    for (let round = 0; round < 5; round++) {
      raw.push(await rawPipe(BYTES, command));
      ours.push(await runTasks({ tasks: [{ name: "flood", run: command }] }));
    }
    const mibps = (ms: number) => `${(BYTES / 1024 / 1024 / (ms / 1000)).toFixed(0)} MiB/s`;
    const ratio = median(raw.map((value, i) => value / (ours[i] as number)));
    const perSecond = (ms: number) => BYTES / 1024 / 1024 / (ms / 1000);
    record({
      name: label === "100-byte lines" ? "stdout_throughput" : "stdout_throughput_no_newlines",
      ours: perSecond(median(ours)),
      reference: perSecond(median(raw)),
      unit: "MiB/s",
      ratio,
      target: ">= 0.7",
      note: `${BYTES / 1024 / 1024} MiB of ${label} through the runner against a raw pipe read by Node; median of 5 rounds' ratios`,
    });
    console.log(
      `(c) throughput, ${label}: runner median ${mibps(median(ours))}, raw pipe ${mibps(median(raw))}; ` +
        `median ratio ${ratio.toFixed(2)} of raw (target >= 0.70)`,
    );
  }
}

const SECTIONS: Record<string, () => Promise<void>> = { a: killLatency, b: perTask, c: throughput };
const section = args.get("section");
if (section !== undefined) {
  const measure = SECTIONS[section];
  if (!measure) throw new Error(`--section=${section}: must be one of ${Object.keys(SECTIONS).join(", ")}`);
  await measure();
} else {
  console.log(
    `runner benchmark: kill rounds ${KILL_ROUNDS}, tasks ${TASKS}, output ${BYTES / 1024 / 1024} MiB; orphans reaped by ${reaper}`,
  );
  // Each measurement in a Node process of its own, as the runner runs one Playbook per process:
  // the heap that 1,000 runs and 2,000 spawns leave behind slows the next section's output path
  // by up to a third, which no runner process in a pod ever carries.
  for (const name of Object.keys(SECTIONS)) {
    const child = spawnSync(process.execPath, [...process.argv.slice(1), `--section=${name}`], {
      stdio: "inherit",
    });
    if (child.status !== 0) process.exit(child.status ?? 1);
  }
}
