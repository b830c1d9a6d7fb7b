// `npm run bench`: the controller side by side with Kubernetes' Job controller on the same
// control plane and bench node, each pair measured in the same run and interleaved, plus the
// runner's benchmark (`bench:runner`) and the CLI's start-up. Prints a table; `--json FILE`
// writes the results (test/bench/results.ts). `--quick` is the smoke test's short run.
// The bench node (bench-node.ts) runs no process: an autopilot writes each pod's life through the
// API (started when bound, ended with the runner's report after its workload's task times, or at
// the runner's limit), the same for Playbook and Job pods, so what is measured is the controllers.
// These machines are shared: read the ratios, and measure twice before believing a change.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { z } from "zod";
import { repoRoot } from "../harness/binaries.js";
import { Api, inPool } from "./api.js";
import { archiveOrphans } from "./archive-bench.js";
import { AuditLog, type AuditRequest, isWrite, summarizeWrites, writeKind } from "./audit.js";
import {
  type BenchCluster,
  createNamespace,
  deleteNamespace,
  JOB_CONTROLLER_USER,
  OUR_USER,
  processUsage,
  setNodeSchedulable,
  startBenchCluster,
  startJobController,
  startOurController,
} from "./bench-cluster.js";
import { MachineLoad } from "./machine-load.js";
import { Observer, ownerKey } from "./observer.js";
import {
  BenchResultsSchema,
  type Comparison,
  ComparisonSchema,
  compare,
  type Figure,
  formatResults,
} from "./results.js";
import { median, percentile, perMinute, ratio } from "./stats.js";
import { finishedPlaybook, JOBS, job, PLAYBOOKS, playbook, playbookPod } from "./workloads.js";

const { values: flags } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    json: { type: "string" },
    workers: { type: "string", default: "2" },
    only: { type: "string" },
    "keep-cluster": { type: "boolean", default: false },
    // Another checkout's build (its root folder), measured beside this one where a lever is
    // weighed: the CLI's start-up and the controller's footprint, as `*_baseline` figures.
    baseline: { type: "string" },
    // The runner's comparisons, each run this many times whole (bench:runner --repeat).
    repeat: { type: "string", default: "1" },
    // The launch section's sizes, e.g. "2000" to weigh a change at the largest alone.
    "launch-sizes": { type: "string", default: "100,500,2000" },
    // A folder for our controller's CPU profiles (node --cpu-prof) in the launch section.
    "controller-profile": { type: "string" },
    // The launch section's sides, e.g. "ours,bare" to weigh a change against the API server alone;
    // "input" is the Playbooks' creates alone, no controller (what ours pays before its pods)
    // (the Job controller's trials, at its default limits above all, take minutes at 2000).
    "launch-sides": { type: "string", default: "ours,lifted,default,bare,input" },
  },
});
const quick = flags.quick ?? false;
const WORKERS = z.coerce.number().int().min(1).parse(flags.workers);
const only = new Set((flags.only ?? "").split(",").filter((s) => s !== ""));
const wanted = (section: string) => only.size === 0 || only.has(section);

// The issue's sizes; --quick (the smoke test, which must end within 5 minutes on 2 cores)
// measures the same names at a fiftieth of the launch sizes and of the cached counts,
// and each note says so.
const LAUNCH_SIZES = z
  .array(z.coerce.number().int().min(1))
  .min(1)
  .parse((flags["launch-sizes"] ?? "").split(","));
const LaunchSideSchema = z.enum(["ours", "lifted", "default", "bare", "input"]);
type LaunchSide = z.infer<typeof LaunchSideSchema>;
const LAUNCH_SIDES = z
  .array(LaunchSideSchema, {
    error: (issue) =>
      `--launch-sides: ${String(issue.input)}: must be some of ${LaunchSideSchema.options.join(", ")}`,
  })
  .min(1)
  .parse((flags["launch-sides"] ?? "").split(",").filter((side) => side !== ""));
const launchSide = (side: LaunchSide) => LAUNCH_SIDES.includes(side);
const LAUNCH_SCALE = quick ? 0.02 : 1;
const CACHE_SCALE = quick ? 0.02 : 1;
const SETTLE = quick ? { rounds: 2, batch: 5 } : { rounds: 5, batch: 10 };
const DEADLINE = quick ? { rounds: 1, batch: 4 } : { rounds: 4, batch: 5 };
const CACHED = [1000, 10000] as const;
const CLI_ROUNDS = quick ? 4 : 40;
/** The `playbook` a checkout built: its bundle, or dist/src/cli/main.js in one older than the bundle. */
function builtCli(checkout: string): string {
  const bundle = path.join(checkout, "dist", "bin", "playbook.js");
  return existsSync(bundle) ? bundle : path.join(checkout, "dist", "src", "cli", "main.js");
}
const baselineCli = flags.baseline ? builtCli(path.resolve(flags.baseline)) : undefined;

const comparisons: Comparison[] = [];
const figures: Figure[] = [];
/** The load since the current section began: each comparison carries it. */
let sectionLoad: MachineLoad | undefined;
const log = (message: string) => process.stderr.write(`[bench] ${message}\n`);
const rand = () => Math.random().toString(36).slice(2, 7);
const now = () => performance.timeOrigin + performance.now();

function addComparison(entry: Omit<Comparison, "ratio"> & { ratio?: number | null }): void {
  const load = entry.load ?? sectionLoad?.reading();
  comparisons.push(ComparisonSchema.parse({ ...compare(entry, ratio), ...(load ? { load } : {}) }));
}
function addFigure(figure: Figure): void {
  figures.push(figure);
}

async function createAll(
  cluster: BenchCluster,
  namespace: string,
  kind: "Playbook" | "Job",
  names: string[],
  body: (name: string) => object,
): Promise<void> {
  const collection =
    kind === "Playbook"
      ? `${PLAYBOOKS}/namespaces/${namespace}/playbooks`
      : `${JOBS}/namespaces/${namespace}/jobs`;
  await inPool(names, 32, (name) => cluster.api.request("POST", collection, body(name)));
}

/** A figure per run, by name: CPU milliseconds by process, requests by client and kind. */
type PerRun = Record<string, number>;

/** An empty list of each side's trials. */
function bySide<T>(): Record<LaunchSide, T[]> {
  return Object.fromEntries(LaunchSideSchema.options.map((side) => [side, [] as T[]])) as Record<
    LaunchSide,
    T[]
  >;
}

/**
 * Reads the CPU time of the cluster's processes, the controller under test and this bench (which
 * creates the owners and watches the pods) at the start of a trial; perRun() gives each one's
 * share of the trial, per run.
 */
function cpuMeter(cluster: BenchCluster, controllerPid: number | undefined) {
  const processes = [
    ...cluster.state.processes.map(({ name, pid }) => ({ name, pid })),
    ...(controllerPid === undefined ? [] : [{ name: "controller", pid: controllerPid }]),
  ];
  const read = (): PerRun => {
    const own = process.cpuUsage();
    const seconds: PerRun = { bench: (own.user + own.system) / 1e6 };
    for (const { name, pid } of processes) {
      try {
        seconds[name] = processUsage(pid).cpuSeconds;
      } catch {
        // A process gone mid-trial counts for nothing; the trial's own checks say why.
      }
    }
    return seconds;
  };
  const start = read();
  return {
    perRun(runs: number): PerRun {
      const end = read();
      return Object.fromEntries(
        Object.entries(end).map(([name, seconds]) => [
          name,
          ((seconds - (start[name] ?? seconds)) * 1000) / runs,
        ]),
      );
    },
  };
}

/** The requests of a trial per run, by writer and kind ("ours status", "scheduler event", "ours get", ...). */
function requestsByClient(requests: readonly AuditRequest[], runs: number): PerRun {
  const writer = (user: string) =>
    user === OUR_USER
      ? "ours"
      : user === JOB_CONTROLLER_USER
        ? "job-controller"
        : user === "system:kube-scheduler"
          ? "scheduler"
          : user.startsWith("system:kube-controller-manager") ||
              user.startsWith("system:serviceaccount:kube-system:")
            ? "kube-controller-manager"
            : user === "admin"
              ? "bench"
              : user;
  const counts: PerRun = {};
  for (const request of requests) {
    const key = `${writer(request.user)} ${isWrite(request) ? writeKind(request) : request.verb}`;
    counts[key] = (counts[key] ?? 0) + 1 / runs;
  }
  return counts;
}

/** "name value, ..." from the largest. */
function perRunList(values: PerRun, digits: number): string {
  return Object.entries(values)
    .sort(([, a], [, b]) => b - a)
    .map(([name, value]) => `${name} ${value.toFixed(digits)}`)
    .join(", ");
}

function meanShares(trials: PerRun[]): PerRun {
  const names = [...new Set(trials.flatMap((trial) => Object.keys(trial)))];
  return Object.fromEntries(
    names.map((name) => [name, trials.reduce((sum, trial) => sum + (trial[name] ?? 0), 0) / trials.length]),
  );
}

const names = (prefix: string, count: number) => Array.from({ length: count }, (_, i) => `${prefix}-${i}`);

// 1. Launch throughput: N owners created at once, one controller running, until every pod exists.
async function launchThroughput(cluster: BenchCluster, observer: Observer): Promise<void> {
  // Pods stay Pending: the node's autopilot writing N pod lives would load the cores measured here.
  await setNodeSchedulable(cluster.api, false);
  // The bare loop's client: our controller's identity, as the controller is.
  const bare = await Api.fromFile(cluster.ourKubeconfig);
  // Who wrote what in each trial: the audit log's requests since the trial began.
  const audit = new AuditLog(cluster.auditLog);
  try {
    for (const size of LAUNCH_SIZES) {
      const n = Math.max(5, Math.round(size * LAUNCH_SCALE));
      const spec = { tasks: [{ name: "work", run: "true" }] };
      const trial = async (side: LaunchSide): Promise<number> => {
        const namespace = `launch-${side}-${n}-${rand()}`;
        await createNamespace(cluster.api, namespace);
        const controller =
          side === "bare" || side === "input"
            ? undefined
            : side === "ours"
              ? await startOurController(cluster, {
                  workers: WORKERS,
                  ...(flags["controller-profile"]
                    ? { nodeOptions: ["--cpu-prof", `--cpu-prof-dir=${flags["controller-profile"]}`] }
                    : {}),
                })
              : await startJobController(cluster, { lifted: side === "lifted", concurrentJobSyncs: WORKERS });
        try {
          const cpu = cpuMeter(cluster, controller?.process.pid);
          const auditMark = audit.mark();
          const t0 = now();
          if (side === "bare") {
            // What the API server accepts at all: the very pods, created in a loop as our
            // controller's identity, as many at once as its workers (it has no QPS limit).
            const pods = `/api/v1/namespaces/${namespace}/pods`;
            await inPool(names("run", n), WORKERS, (name) =>
              bare.request("POST", pods, playbookPod(`${name}-1`, namespace, spec)),
            );
          } else {
            const kind = side === "ours" || side === "input" ? "Playbook" : "Job";
            await createAll(cluster, namespace, kind, names("run", n), (name) =>
              kind === "Playbook" ? playbook(name, spec) : job(name, namespace, spec),
            );
            // The owners' own creates share the server with the pods': when they were all in.
            log(`launch ${n} (${side}): ${n} ${kind}s created in ${((now() - t0) / 1000).toFixed(2)}s`);
          }
          // The input side is the Playbooks' creates alone, with no controller: what ours pays before
          // any pod of its own.
          if (side !== "input")
            await observer.until(
              `${n} pods in ${namespace}`,
              () => observer.podCount(namespace) >= n,
              900_000,
            );
          const elapsed = now() - t0;
          cpuPerRun[side].push(cpu.perRun(n));
          requestsPerRun[side].push(requestsByClient(audit.since(auditMark), n));
          log(`launch ${n} (${side}): ${(elapsed / 1000).toFixed(2)}s`);
          return perMinute(n, elapsed);
        } finally {
          // Stopped first, so that no controller makes pods while the namespace goes (deleteNamespace
          // takes the Job controller's finalizers off its pods). --quick does not wait: what is left
          // of the namespace is Pending pods, gone with the cluster.
          await controller?.stop();
          if (quick) await cluster.api.request("DELETE", `/api/v1/namespaces/${namespace}`);
          else await deleteNamespace(cluster.api, namespace);
        }
      };
      // Interleaved: ours, the lifted Job controller, the default one, the bare loop; then again
      // but for the default one (minutes at 2000), so drift in the machine's load falls on all sides.
      const measured = bySide<number>();
      const requestsPerRun = bySide<PerRun>();
      const cpuPerRun = bySide<PerRun>();
      for (const round of quick ? [1] : [1, 2])
        for (const side of LAUNCH_SIDES)
          if (round === 1 || side !== "default") measured[side].push(await trial(side));
      const mean = (values: number[]) => values.reduce((sum, value) => sum + value, 0) / values.length;
      const ours = mean(measured.ours);
      if (launchSide("ours") && launchSide("bare"))
        addComparison({
          name: `launch_vs_api_${size}`,
          ours,
          reference: mean(measured.bare),
          unit: "pods/min",
          target: ">= 0.8",
          note: `${n} Playbooks created at once, against the same ${n} pods (as our controller builds them) created in a bare loop, ${WORKERS} at a time, as our controller's identity: what the API server accepts at all at the controller's client limits (${WORKERS} workers, no QPS limit); ours also writes each Playbook's status and an event, and the bench creates the Playbooks (see api_writes_per_run)`,
        });
      if (launchSide("ours") && launchSide("lifted"))
        addComparison({
          name: `launch_throughput_${size}`,
          ours,
          reference: mean(measured.lifted),
          unit: "pods/min",
          target: ">= 1.0",
          note: `${n} created at once${quick ? ` (--quick: a fiftieth of ${size})` : ""}; reference: kube-controller-manager's Job controller with --kube-api-qps 1000 --kube-api-burst 2000 --concurrent-job-syncs ${WORKERS}${launchSide("default") ? `; at its default limits ${mean(measured.default).toFixed(0)} pods/min` : ""}`,
        });
      // Where the cores went: each process's CPU per run over the trial, summed over the machine.
      for (const side of LAUNCH_SIDES) {
        const shares = meanShares(cpuPerRun[side]);
        const total = Object.values(shares).reduce((sum, ms) => sum + ms, 0);
        addFigure({
          name: `launch_cpu_per_run_${size}_${side}`,
          value: total,
          unit: "ms/run",
          note: `CPU per run over the ${side === "input" ? "Playbooks' creates alone (no controller)" : "launch"} of ${n}, by process: ${perRunList(shares, 2)}; API requests per run, by client and kind: ${perRunList(meanShares(requestsPerRun[side]), 2)}`,
        });
      }
      if (launchSide("default"))
        addFigure({
          name: `launch_throughput_${size}_job_controller_default`,
          value: mean(measured.default),
          unit: "pods/min",
          note: `the Job controller at its default client limits (20 QPS, burst 30, 5 job syncs), ${n} Jobs`,
        });
    }
  } finally {
    bare.close();
    await setNodeSchedulable(cluster.api, true);
  }
}

// 2 and 4. Runs that succeed: settle latency, writes, conflicts, events, CPU.
async function commonRuns(cluster: BenchCluster, observer: Observer): Promise<void> {
  const namespace = `settle-${rand()}`;
  await createNamespace(cluster.api, namespace);
  const ours = await startOurController(cluster, { workers: WORKERS });
  const reference = await startJobController(cluster, { lifted: true, concurrentJobSyncs: WORKERS });
  const audit = new AuditLog(cluster.auditLog);
  const spec = { tasks: [{ name: "work", run: "echo done" }] };
  const ourLatency: number[] = [];
  const jobLatency: number[] = [];
  let ourCpu = 0;
  let ourWrites = {
    objectWrites: 0,
    conflicts: 0,
    events: 0,
    byKind: {} as Record<string, number>,
    byVerbAndResource: {} as Record<string, number>,
  };
  let jobWrites = {
    ...ourWrites,
    byKind: {} as Record<string, number>,
    byVerbAndResource: {} as Record<string, number>,
  };
  const sum = (a: Record<string, number>, b: Record<string, number>) => {
    const total = { ...a };
    for (const [k, v] of Object.entries(b)) total[k] = (total[k] ?? 0) + v;
    return total;
  };
  const add = (a: typeof ourWrites, b: typeof ourWrites) => ({
    objectWrites: a.objectWrites + b.objectWrites,
    conflicts: a.conflicts + b.conflicts,
    events: a.events + b.events,
    byKind: sum(a.byKind, b.byKind),
    byVerbAndResource: sum(a.byVerbAndResource, b.byVerbAndResource),
  });
  const latencies = (kind: "Playbook" | "Job", batch: string[], into: number[]) => {
    for (const name of batch) {
      const key = ownerKey(kind, namespace, name);
      const pod = [...observer.pods.values()].find((p) => p.owner === key && p.terminatedAt !== undefined);
      const end = observer.ended.get(key);
      if (pod?.terminatedAt !== undefined && end) into.push(end.at - pod.terminatedAt);
    }
  };
  try {
    for (let round = 0; round < SETTLE.rounds; round++) {
      for (const kind of ["Playbook", "Job"] as const) {
        const batch = names(`${kind.toLowerCase()}-${round}`, SETTLE.batch);
        const mark = audit.mark();
        const cpu0 = processUsage(ours.process.pid).cpuSeconds;
        await createAll(cluster, namespace, kind, batch, (name) =>
          kind === "Playbook" ? playbook(name, spec) : job(name, namespace, spec),
        );
        await observer.until(
          `${batch.length} ${kind}s to finish in ${namespace}`,
          () => batch.every((name) => observer.ended.has(ownerKey(kind, namespace, name))),
          300_000,
        );
        // The writes that follow the terminal condition (a Job's pod finalizer, an event) belong to the run too.
        await settleQuietly(audit, kind === "Playbook" ? OUR_USER : JOB_CONTROLLER_USER);
        const requests = audit.since(mark);
        if (kind === "Playbook") {
          ourCpu += processUsage(ours.process.pid).cpuSeconds - cpu0;
          ourWrites = add(ourWrites, summarizeWrites(requests, OUR_USER, namespace));
          latencies(kind, batch, ourLatency);
        } else {
          jobWrites = add(jobWrites, summarizeWrites(requests, JOB_CONTROLLER_USER, namespace));
          latencies(kind, batch, jobLatency);
        }
      }
    }
  } finally {
    await deleteNamespace(cluster.api, namespace);
    await ours.stop();
    await reference.stop();
  }
  const runs = SETTLE.rounds * SETTLE.batch;
  const note = `${runs} runs of one task each side, in batches of ${SETTLE.batch}, interleaved; both controllers running`;
  for (const p of [50, 99]) {
    addComparison({
      name: `settle_latency_p${p}`,
      ours: ourLatency.length > 0 ? percentile(ourLatency, p) : null,
      reference: jobLatency.length > 0 ? percentile(jobLatency, p) : null,
      unit: "ms",
      target: "<= 1.0",
      note: `pod seen terminated -> owner seen with its terminal condition, by one watcher; ${note}`,
    });
  }
  addComparison({
    name: "api_writes_per_run",
    ours: ourWrites.objectWrites / runs,
    reference: jobWrites.objectWrites / runs,
    unit: "writes/run",
    target: "<= 1.0",
    note: `object writes (not events) in the audit log by each controller's identity; ours ${JSON.stringify(ourWrites.byVerbAndResource)}; Job controller ${JSON.stringify(jobWrites.byVerbAndResource)}`,
  });
  // Per run, by kind: the create, the status writes and the events (a regression names itself).
  for (const kind of ["create", "status", "event", "other"]) {
    addFigure({
      name: `api_writes_per_run_${kind}`,
      value: (ourWrites.byKind[kind] ?? 0) / runs,
      unit: "writes/run",
      note: `Job controller: ${((jobWrites.byKind[kind] ?? 0) / runs).toFixed(2)} per Job`,
    });
  }
  addFigure({
    name: "api_conflicts_per_run",
    value: ourWrites.conflicts / runs,
    unit: "409s/run",
    note: `Job controller: ${(jobWrites.conflicts / runs).toFixed(2)} per Job`,
  });
  addFigure({
    name: "events_per_run",
    value: ourWrites.events / runs,
    unit: "events/run",
    note: `Job controller: ${(jobWrites.events / runs).toFixed(2)} per Job`,
  });
  addFigure({
    name: "job_controller_writes_per_job",
    value: jobWrites.objectWrites / runs,
    unit: "writes/Job",
  });
  addFigure({
    name: "controller_cpu_seconds_per_1000_runs",
    value: (ourCpu / runs) * 1000,
    unit: "s",
    note: `our controller's user+system CPU while its ${runs} runs went from create to finished, scaled to 1000`,
  });
}

/** Waits until the user made no request for a moment, so writes that trail a run are counted. */
async function settleQuietly(audit: AuditLog, user: string): Promise<void> {
  let mark = audit.mark();
  for (let i = 0; i < 20; i++) {
    await new Promise((resolve) => setTimeout(resolve, 500));
    const writes = audit
      .since(mark)
      .filter((r) => r.user === user && r.verb !== "watch" && r.verb !== "list" && r.verb !== "get");
    if (writes.length === 0) return;
    mark = audit.mark();
  }
}

// 3. Deadline accuracy: from the ceiling (or activeDeadlineSeconds) instant to the terminal condition.
async function deadlineAccuracy(cluster: BenchCluster, observer: Observer): Promise<void> {
  const namespace = `deadline-${rand()}`;
  await createNamespace(cluster.api, namespace);
  const ours = await startOurController(cluster, { workers: WORKERS });
  const reference = await startJobController(cluster, { lifted: true, concurrentJobSyncs: WORKERS });
  const ourDelay: number[] = [];
  const jobDelay: number[] = [];
  const sleepy = { killGrace: "1s", tasks: [{ name: "wait", run: "sleep 60" }] };
  try {
    for (let round = 0; round < DEADLINE.rounds; round++) {
      for (const kind of ["Playbook", "Job"] as const) {
        const batch = names(`${kind.toLowerCase()}-${round}`, DEADLINE.batch);
        await createAll(cluster, namespace, kind, batch, (name) =>
          kind === "Playbook"
            ? playbook(name, { ...sleepy, ceiling: "2s" })
            : job(name, namespace, sleepy, 2),
        );
        await observer.until(
          `${batch.length} ${kind}s past their deadline in ${namespace}`,
          () => batch.every((name) => observer.ended.has(ownerKey(kind, namespace, name))),
          300_000,
        );
        for (const name of batch) {
          const key = ownerKey(kind, namespace, name);
          const end = observer.ended.get(key);
          if (!end) continue;
          if (kind === "Playbook") {
            const pod = [...observer.pods.values()].find((p) => p.owner === key);
            if (end.reason !== "RunCeiling" || !pod?.runStart)
              throw new Error(`${key} ended ${end.reason}, not RunCeiling`);
            ourDelay.push(end.at - (Date.parse(pod.runStart) + 2_000));
          } else {
            if (end.reason !== "DeadlineExceeded" || !end.startTime)
              throw new Error(`${key} ended ${end.reason}, not DeadlineExceeded`);
            jobDelay.push(end.at - (Date.parse(end.startTime) + 2_000));
          }
        }
      }
    }
  } finally {
    await deleteNamespace(cluster.api, namespace);
    await ours.stop();
    await reference.stop();
  }
  addComparison({
    name: "deadline_to_condition_p99",
    ours: ourDelay.length > 0 ? percentile(ourDelay, 99) : null,
    reference: jobDelay.length > 0 ? percentile(jobDelay, 99) : null,
    unit: "ms",
    target: "<= 1.0",
    note: `${ourDelay.length} runs each side: the 2s ceiling (from the pod's run-start annotation) until RunCeiling is seen, against activeDeadlineSeconds 2 (from status.startTime, whole seconds, as the Job controller counts it) until the Failed/DeadlineExceeded condition is seen; our p50 ${ourDelay.length > 0 ? median(ourDelay).toFixed(0) : "-"} ms, target within 1000 ms at p99`,
  });
}

async function waitStableRss(pid: number): Promise<number> {
  let last = processUsage(pid).rssMb;
  let stable = 0;
  for (let i = 0; i < 120 && stable < 4; i++) {
    await new Promise((resolve) => setTimeout(resolve, 500));
    const rss = processUsage(pid).rssMb;
    stable = Math.abs(rss - last) < 1 ? stable + 1 : 0;
    last = rss;
  }
  return last;
}

async function queueDrained(metricsUrl: string): Promise<void> {
  for (let i = 0; i < 600; i++) {
    const text = await (await fetch(`${metricsUrl}/metrics`)).text();
    if (/^playbook_workqueue_depth 0$/m.test(text)) return;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

// 6. Footprint: resident memory with 1,000 and 10,000 finished Playbooks cached, beside the Job
// controller holding as many finished Jobs.
async function footprint(cluster: BenchCluster): Promise<void> {
  const namespace = `cache-${rand()}`;
  await createNamespace(cluster.api, namespace);
  let created = 0;
  const ourRss = new Map<number, number>();
  const baselineRss = new Map<number, number>();
  const jobRss = new Map<number, number>();
  const jobNote: string[] = [];
  for (const named of CACHED) {
    const count = Math.round(named * CACHE_SCALE);
    const batch = Array.from({ length: count - created }, (_, i) => created + i);
    const t0 = now();
    await inPool(batch, 32, async (i) => {
      const name = `done-${i}`;
      const { object, status } = finishedPlaybook(name, i);
      await cluster.api.request("POST", `${PLAYBOOKS}/namespaces/${namespace}/playbooks`, object);
      await cluster.api.request(
        "PATCH",
        `${PLAYBOOKS}/namespaces/${namespace}/playbooks/${name}/status`,
        { status },
        "application/merge-patch+json",
      );
      const finished = await finishedJob(cluster, namespace, `done-${i}`);
      if (!finished && jobNote.length === 0)
        jobNote.push("Jobs are suspended, not finished: the API server refused a finished status");
    });
    created = count;
    log(`cached ${count} Playbooks and Jobs in ${((now() - t0) / 1000).toFixed(0)}s`);
    for (const cli of baselineCli ? [undefined, baselineCli] : [undefined]) {
      const ours = await startOurController(cluster, { workers: WORKERS, ...(cli ? { cli } : {}) });
      try {
        await queueDrained(ours.metricsUrl);
        (cli ? baselineRss : ourRss).set(named, await waitStableRss(ours.process.pid));
      } finally {
        await ours.stop();
      }
    }
    const reference = await startJobController(cluster, { lifted: true, concurrentJobSyncs: WORKERS });
    try {
      jobRss.set(named, await waitStableRss(reference.process.pid));
    } finally {
      await reference.stop();
    }
    log(
      `RSS with ${count} cached: ours ${ourRss.get(named)?.toFixed(0)} MB, Job controller ${jobRss.get(named)?.toFixed(0)} MB`,
    );
  }
  // Left for the cluster's teardown: deleting 20,000 objects would only add minutes.
  const scaled = quick ? " (--quick: a fiftieth of the count in the name)" : "";
  const note = `VmRSS${scaled} once the work queue drained and memory held still, finished Playbooks with three tasks (about 2.5 KB each); reference: kube-controller-manager running only its Job controller with as many Jobs${jobNote.length > 0 ? ` (${jobNote[0]})` : ""}`;
  addComparison({
    name: "controller_rss_mb_10000",
    ours: ourRss.get(10000) ?? null,
    reference: jobRss.get(10000) ?? null,
    unit: "MB",
    target: "<= 1.0",
    note: `${note}; target also at most 150 MB`,
  });
  for (const count of CACHED) {
    addFigure({ name: `controller_rss_mb_${count}`, value: ourRss.get(count) ?? null, unit: "MB", note });
    addFigure({ name: `job_controller_rss_mb_${count}`, value: jobRss.get(count) ?? null, unit: "MB" });
    if (baselineCli) {
      addFigure({
        name: `controller_rss_mb_${count}_baseline`,
        value: baselineRss.get(count) ?? null,
        unit: "MB",
        note: baselineCli,
      });
    }
  }
}

/** A Job as the Job controller leaves a finished one; false when the API server refuses that status. */
async function finishedJob(cluster: BenchCluster, namespace: string, name: string): Promise<boolean> {
  const body = job(name, namespace, { tasks: [{ name: "work", run: "true" }] }) as {
    spec: Record<string, unknown>;
  };
  body.spec.suspend = true;
  await cluster.api.request("POST", `${JOBS}/namespaces/${namespace}/jobs`, body);
  const start = "2026-11-01T00:00:00Z";
  const end = "2026-11-01T00:01:35Z";
  const condition = (type: string, reason: string) => ({
    type,
    status: "True",
    reason,
    message: "Reached expected number of succeeded pods",
    lastProbeTime: end,
    lastTransitionTime: end,
  });
  try {
    await cluster.api.request(
      "PATCH",
      `${JOBS}/namespaces/${namespace}/jobs/${name}/status`,
      {
        status: {
          startTime: start,
          completionTime: end,
          succeeded: 1,
          ready: 0,
          terminating: 0,
          uncountedTerminatedPods: {},
          conditions: [
            condition("SuccessCriteriaMet", "CompletionsReached"),
            condition("Complete", "CompletionsReached"),
          ],
        },
      },
      "application/merge-patch+json",
    );
    return true;
  } catch {
    return false;
  }
}

// 5. Start-up: the CLI against a bare Node, interleaved.
function timeProcess(command: string, args: string[]): number {
  const t0 = performance.now();
  const result = spawnSync(command, args, { stdio: ["ignore", "ignore", "ignore"] });
  // Exit codes vary (124 for a run killed at its deadline; timeout -s KILL dies of its own signal).
  if (result.error) throw result.error;
  return performance.now() - t0;
}

function cliStartup(): void {
  const cli = builtCli(repoRoot());
  const dir = mkdtempSync(path.join(tmpdir(), "bench-cli-"));
  const oneTask = path.join(dir, "one.yaml");
  const killed = path.join(dir, "killed.yaml");
  writeFileSync(
    oneTask,
    "apiVersion: playbook.dev/v1alpha1\nkind: Playbook\nmetadata: {name: one}\nspec:\n  tasks: [{name: one, run: 'true'}]\n",
  );
  writeFileSync(
    killed,
    "apiVersion: playbook.dev/v1alpha1\nkind: Playbook\nmetadata: {name: killed}\nspec:\n  killGrace: 0s\n  tasks: [{name: one, run: 'sleep 5', timeout: 1s}]\n",
  );
  const bare: number[] = [];
  const version: number[] = [];
  const run: number[] = [];
  const deadline: number[] = [];
  const timeout: number[] = [];
  const baselineVersion: number[] = [];
  const baselineRun: number[] = [];
  timeProcess(process.execPath, [cli, "--version"]); // warm the page cache (and any compile cache)
  for (let i = 0; i < CLI_ROUNDS; i++) {
    bare.push(timeProcess(process.execPath, ["-e", ""]));
    version.push(timeProcess(process.execPath, [cli, "--version"]));
    if (baselineCli) {
      baselineVersion.push(timeProcess(process.execPath, [baselineCli, "--version"]));
      baselineRun.push(timeProcess(process.execPath, [baselineCli, "run", "-f", oneTask]));
    }
    run.push(timeProcess(process.execPath, [cli, "run", "-f", oneTask]));
    if (i < (quick ? 2 : 5)) {
      timeout.push(timeProcess("timeout", ["-s", "KILL", "1", "sleep", "5"]));
      deadline.push(timeProcess(process.execPath, [cli, "run", "-f", killed]));
    }
  }
  rmSync(dir, { recursive: true, force: true });
  const note = `median of ${CLI_ROUNDS} interleaved starts, against a bare node -e ""`;
  addComparison({
    name: "cli_startup",
    ours: median(version),
    reference: median(bare),
    unit: "ms",
    target: "<= 2.0",
    note: `playbook --version; ${note}`,
  });
  addComparison({
    name: "cli_run_one_task",
    ours: median(run),
    reference: median(bare),
    unit: "ms",
    target: "<= 2.0",
    note: `playbook run of one 'true' task; ${note}`,
  });
  if (baselineCli) {
    addFigure({
      name: "cli_startup_baseline",
      value: median(baselineVersion) / median(bare),
      unit: "x node",
      note: baselineCli,
    });
    addFigure({
      name: "cli_run_one_task_baseline",
      value: median(baselineRun) / median(bare),
      unit: "x node",
      note: baselineCli,
    });
  }
  addComparison({
    name: "cli_run_killed_at_deadline",
    ours: median(deadline),
    reference: median(timeout),
    unit: "ms",
    target: "<= 1.25",
    note: `playbook run of 'sleep 5' with a 1s timeout and killGrace 0s, against GNU timeout -s KILL 1 sleep 5; median of ${deadline.length} interleaved`,
  });
}

// The runner's own benchmark, in its own processes as `npm run bench:runner` runs it.
function runnerBench(): void {
  const file = path.join(mkdtempSync(path.join(tmpdir(), "bench-runner-")), "results.jsonl");
  const child = spawnSync(
    process.execPath,
    [
      path.join(repoRoot(), "dist", "test", "bench", "runner-bench.js"),
      // --quick: enough rounds to show the runner works, few enough for the smoke test's 5 minutes.
      ...(quick ? ["--quick", "--kill-rounds=5", "--tasks=60", "--bytes=16"] : []),
      `--repeat=${flags.repeat}`,
      `--results-file=${file}`,
    ],
    { stdio: ["ignore", 2, 2] },
  );
  if (child.status !== 0) throw new Error(`runner benchmark exited ${child.status}`);
  for (const line of readFileSync(file, "utf8")
    .split("\n")
    .filter((l) => l !== "")) {
    addComparison(ComparisonSchema.parse(JSON.parse(line)));
  }
  rmSync(path.dirname(file), { recursive: true, force: true });
}

async function main(): Promise<void> {
  const startedAt = new Date().toISOString();
  const runLoad = new MachineLoad();
  const timed = async (section: string, measure: () => Promise<void> | void) => {
    if (!wanted(section)) return;
    const t0 = now();
    sectionLoad = new MachineLoad();
    try {
      await measure();
    } finally {
      sectionLoad.stop();
      sectionLoad = undefined;
    }
    log(`${section}: ${((now() - t0) / 1000).toFixed(0)}s`);
  };
  await timed("cli", cliStartup);
  await timed("runner", runnerBench);
  const clusterSections = ["launch", "settle", "deadline", "footprint", "archive"].filter(wanted);
  if (clusterSections.length > 0) {
    const stateDir = mkdtempSync(path.join(tmpdir(), "playbook-bench-"));
    const cluster = await startBenchCluster(stateDir, log);
    const stopOnSignal = () => {
      void cluster
        .stop()
        .finally(() => rmSync(stateDir, { recursive: true, force: true }))
        .finally(() => process.exit(130));
    };
    process.once("SIGINT", stopOnSignal);
    process.once("SIGTERM", stopOnSignal);
    addFigure({
      name: "cluster_up_seconds",
      value: cluster.upSeconds,
      unit: "s",
      note: "etcd, kube-apiserver, kube-controller-manager, kube-scheduler, CRDs and the bench node (scripted, no kubelet), binaries already built",
    });
    const observer = new Observer(cluster.api);
    observer.start();
    try {
      await timed("launch", () => launchThroughput(cluster, observer));
      await timed("settle", () => commonRuns(cluster, observer));
      await timed("deadline", () => deadlineAccuracy(cluster, observer));
      await timed("footprint", () => footprint(cluster));
      // The log archive's orphans after runs created and deleted (archive-bench.ts); --quick: 50.
      await timed("archive", async () => {
        const runs = quick ? 50 : 1000;
        for (const figure of await archiveOrphans(cluster, { runs, quick, workers: WORKERS, log }))
          addFigure(figure);
      });
    } finally {
      await observer.stop();
      if (flags["keep-cluster"]) log(`Cluster left running: KUBECONFIG=${cluster.state.kubeconfig}`);
      else {
        await cluster.stop();
        rmSync(stateDir, { recursive: true, force: true });
      }
    }
  }
  const results = BenchResultsSchema.parse({
    version: 1,
    quick,
    startedAt,
    finishedAt: new Date().toISOString(),
    machine: {
      cores: cpus().length,
      loadAverage: loadavg().map((l) => Math.round(l * 100) / 100),
      load: runLoad.stop(),
    },
    comparisons,
    figures,
  });
  process.stdout.write(formatResults(results));
  if (flags.json) writeFileSync(flags.json, `${JSON.stringify(results, null, 2)}\n`);
}

await main();
