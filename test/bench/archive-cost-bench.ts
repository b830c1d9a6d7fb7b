// `npm run bench:archive [-- --quick] [-- --rounds=N] [-- --bytes=N] [-- --upload=runner|follow]
// [-- --colocated] [-- --results-file=F] [-- --controller-profile=DIR]`: what the log archive (issue 58) costs a run, on a real node of
// its own (containerd under Kubernetes' kubelet, SeaweedFS's S3 server beside the API server; root,
// and no other real node running: take /tmp/real-node.lock). Two controllers run as the chart runs
// them (each its own process, dist/bin/playbook.js, the chart's heap flags, 2 workers), one per
// namespace: one with the archive on, one with it off. Each round runs the same Playbook once
// under each, the order turned every round (on off, off on, ...):
//   archive_stdout_throughput: one task prints --bytes (default 256 MiB) of numbered 100-byte
//     lines to stdout; its throughput is those bytes over the task's own time as status.tasks
//     gives it (completionTime - startTime, from the runner's report, ms). Archive on against
//     off: the median of the rounds' paired ratios, with p10..p90 and each side's median MiB/s.
//     Target >= 0.9. With the archive on, a run must end LogArchived Archived or Incomplete, else
//     the bench stops; Archived must hold every line the task printed, in order, behind the
//     runner's prefix, and Incomplete must miss some, else the bench fails once the figures are
//     printed, naming the first gaps.
//   archive_controller_cpu_per_run: the controller process's CPU (user + system, /proc/PID/stat)
//     from the Playbook's creation until the run is settled (Succeeded, and with the archive on,
//     LogArchived settled), on against off; and the archive's CPU per archived MiB.
// The node's processes (kubelet, containerd, kube-proxy, and every pod through its cgroup's
// cpuset) have the last CPU to themselves, the control plane, the store, the controllers and the
// relays the others, as on a cluster where they are other machines (cpu-split.ts); --colocated
// leaves every process on every CPU.
// Each round's CPU of the cluster's other processes (the kubelet, kube-apiserver, containerd,
// weed, etcd) is printed by side too: where the archive's cost goes besides the controller.
// --quick: one round of 16 MiB. --controller-profile: the archiving controller under node
// --cpu-prof, its profile written to DIR at its exit.
import { appendFileSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { CoreV1Api, CustomObjectsApi, KubeConfig } from "@kubernetes/client-node";
import { LOG_ARCHIVED } from "../../src/api/log-archive.js";
import { GROUP, PLURAL, VERSION } from "../../src/api/playbook.js";
import { devArchiveSettings, startDevCluster } from "../harness/dev-cluster.js";
import { freePort, waitFor } from "../harness/processes.js";
import { projectImageArchive, projectImageName } from "../harness/real-node/images.js";
import { confineRealNodePods } from "../harness/real-node/real-node.js";
import { processUsage, type RunningController, startOurController } from "./bench-cluster.js";
import { createBenchNamespace } from "./bench-namespace.js";
import { type CpuSplit, splitCpus } from "./cpu-split.js";
import { type LoadDuring, MachineLoad } from "./machine-load.js";
import { cpuByCommand, readTreeCpu } from "./process-cpu.js";
import { ComparisonSchema, FigureSchema } from "./results.js";
import { median, meetsTarget, percentile, spread } from "./stats.js";

const MiB = 1024 * 1024;
const args = new Map(process.argv.slice(2).map((a) => a.replace(/^--/, "").split("=") as [string, string]));
const quick = args.has("quick");
const ROUNDS = positive("rounds", quick ? 1 : 8);
/** Whole 100-byte lines: --bytes rounded down to a multiple of 100. */
const LINE = 100;
const LINES = Math.floor(positive("bytes", (quick ? 16 : 256) * MiB) / LINE);
const BYTES = LINES * LINE;
const RESULTS_FILE = args.get("results-file");
/** `--controller-profile=DIR`: the archiving controller's CPU profile (node --cpu-prof), written at its exit. */
const PROFILE = args.get("controller-profile");
const TARGET = ">= 0.9";
/** How long reading one archived object back may take. */
const READ_BACK_MS = 300_000;
/** Who carries the log into the archive (--log-archive-upload): the runner (default) or the controller's follow. */
const UPLOAD = args.get("upload") ?? "runner";
/** The node's CPU apart from the control plane's (cpu-split.ts) unless --colocated. */
const SPLIT = !args.has("colocated");
let cpuSplit: CpuSplit | undefined;
if (UPLOAD !== "runner" && UPLOAD !== "follow")
  throw new Error(`--upload=${UPLOAD}: must be runner or follow`);
const TASK = "gen";
/** The runner's prefix of each task line. */
const PREFIX = `[${TASK}] `;

function positive(name: string, fallback: number): number {
  const given = args.get(name);
  if (given === undefined) return fallback;
  const value = Number(given);
  if (!Number.isInteger(value) || value <= 0)
    throw new Error(`--${name}=${given}: must be a whole number above 0`);
  return value;
}

const log = (message: string) => process.stderr.write(`bench:archive: ${message}\n`);
const fixed = (n: number, digits = 2) => n.toFixed(digits);
const range = (values: number[], digits = 2) =>
  `p10..p90 ${fixed(percentile(values, 10), digits)}..${fixed(percentile(values, 90), digits)}`;

/**
 * The task: node (in the runner's image) writes LINES lines, each its number (9 digits), zeros and
 * a newline, 100 bytes, in blocks of 655 lines, waiting for the pipe to drain; it ends on its own
 * (no SIGPIPE'd `yes | head`).
 */
function generator(): string {
  const script =
    `const L=${LINE},B=655,b=Buffer.from(('0'.repeat(L-1)+'\\n').repeat(B),'latin1');let i=0;` +
    `function w(){while(i<${LINES}){const k=Math.min(${LINES}-i,B);for(let j=0;j<k;j++,i++)b.write(String(i).padStart(9,'0'),j*L,'latin1');` +
    "if(!process.stdout.write(Buffer.from(b.subarray(0,k*L))))return process.stdout.once('drain',w);}}w();";
  return `node -e "${script}"`;
}

/** The task's line number `i`, as the archive holds it: behind the runner's prefix. */
const taskLine = (i: number) => `${PREFIX}${String(i).padStart(9, "0")}${"0".repeat(LINE - 10)}\n`;

type Side = "on" | "off";

interface Round {
  side: Side;
  /** the task's own time, from status.tasks (ms) */
  taskMs: number;
  /** the controller's CPU seconds from the Playbook's creation until the run settled */
  controllerCpu: number;
  /** the task's own CPU seconds (status.tasks cpuSeconds: the generator) */
  taskCpu: number;
  /** bytes in the archived object (on), 0 (off) */
  archivedBytes: number;
  /** the cluster's processes' CPU seconds over the run, by command name */
  cluster: Map<string, number>;
}

interface PlaybookStatus {
  phase?: string;
  conditions?: { type: string; status: string; reason: string; message: string }[];
  tasks?: { name: string; startTime?: string; completionTime?: string; cpuSeconds?: number }[];
  log?: { bucket: string; key: string; bytes: number; sha256: string };
}

/**
 * The object's task lines behind the runner's prefix (the runner's own lines are skipped): how
 * many are the task's lines whole, the first gaps (line numbers missing) and the first lines that
 * are not a task line whole (parts of two lines joined).
 */
async function taskLinesIn(
  body: AsyncIterable<Buffer>,
): Promise<{ count: number; gaps: string[]; damaged: string[] }> {
  const prefix = Buffer.from(PREFIX);
  let count = 0;
  let next = 0;
  const gaps: string[] = [];
  const damaged: string[] = [];
  const check = (line: Buffer) => {
    if (!line.subarray(0, prefix.length).equals(prefix)) return;
    const text = line.toString("latin1");
    const number = Number(text.slice(prefix.length, prefix.length + 9));
    if (!Number.isInteger(number) || text !== taskLine(number)) {
      if (damaged.length < 3) damaged.push(JSON.stringify(text));
      return;
    }
    if (number !== next && gaps.length < 5) gaps.push(`${next}..${number - 1}`);
    next = number + 1;
    count++;
  };
  let carry = Buffer.alloc(0);
  for await (const chunk of body) {
    const buffer = carry.length > 0 ? Buffer.concat([carry, chunk]) : chunk;
    let at = 0;
    for (let end = buffer.indexOf(10, at); end !== -1; end = buffer.indexOf(10, at)) {
      check(buffer.subarray(at, end + 1));
      at = end + 1;
    }
    carry = Buffer.from(buffer.subarray(at));
  }
  if (next !== LINES && gaps.length < 5) gaps.push(`${next}..${LINES - 1} (the end)`);
  return { count, gaps, damaged };
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error("a real node needs root");
  const stateDir = mkdtempSync(path.join(os.tmpdir(), "bench-archive-cluster-"));
  const project = await projectImageArchive(log);
  if (!project) throw new Error(`${projectImageName()} is not built: npm run image:build`);
  const cluster = await startDevCluster({
    stateDir,
    daemon: false,
    startController: false,
    node: "real",
    log,
    images: [project],
    objectStore: true,
  });
  const store = cluster.objectStore;
  if (!store) throw new Error("the dev cluster started no object store");
  const rounds: Round[] = [];
  /** Archives whose LogArchived is not true to the object: Archived missing lines, Incomplete whole. */
  const untrue: string[] = [];
  let incompleteRuns = 0;
  const controllers: Partial<Record<Side, RunningController>> = {};
  let during: LoadDuring | undefined;
  try {
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromFile(cluster.state.kubeconfig);
    const core = kubeConfig.makeApiClient(CoreV1Api);
    const custom = kubeConfig.makeApiClient(CustomObjectsApi);
    const namespaces: Record<Side, string> = { on: "bench-archive-on", off: "bench-archive-off" };
    // --upload=follow: the controller follows the pod's log; else the runner uploads its own.
    const podEndpoint = UPLOAD === "runner" ? cluster.objectStorePodEndpoint : undefined;
    if (UPLOAD === "runner" && !podEndpoint)
      throw new Error("the dev cluster published no store for the node's pods");
    const archive = devArchiveSettings(store, podEndpoint);
    const identity = { state: cluster.state, ourKubeconfig: cluster.state.kubeconfig };
    for (const side of ["on", "off"] as const) {
      await createBenchNamespace(core, custom, namespaces[side]);
      controllers[side] = await startOurController(identity, {
        workers: 2,
        name: `controller-archive-${side}`,
        extraArgs: [
          `--namespaces=${namespaces[side]}`,
          `--runner-image=${projectImageName()}`,
          // The log API is served while the archive is on: on loopback, a port of its own.
          ...(side === "on" ? [...archive.args, `--log-api-address=127.0.0.1:${await freePort()}`] : []),
        ],
        ...(side === "on" ? { env: archive.env } : {}),
        ...(PROFILE && side === "on" ? { nodeOptions: ["--cpu-prof", `--cpu-prof-dir=${PROFILE}`] } : {}),
      });
    }
    const labels = new Map(
      (["on", "off"] as const).map((side) => [
        (controllers[side] as RunningController).process.pid,
        `controller-archive-${side}`,
      ]),
    );
    const roots = [...cluster.state.processes.map((p) => p.pid), ...labels.keys()];
    /** The CPU lists the pods' processes may run on now, once they are confined to the node's CPU. */
    let podCpuLists: (() => string[]) | undefined;
    if (SPLIT) {
      const split = splitCpus(cluster.state.processes, [process.pid, ...labels.keys()]);
      if (split) podCpuLists = confineRealNodePods(cluster.state.stateDir, split.node);
      log(
        split
          ? `the node's processes on CPU ${split.node}, the control plane, the store and the relays on CPU ${split.controlPlane}`
          : "one CPU: nothing to split",
      );
      cpuSplit = split;
    }
    /** Where the pods' processes were seen allowed to run while the runs went on: the node's CPU alone. */
    const podCpus = new Set<string>();
    const client = store.client();

    const getStatus = async (namespace: string, name: string): Promise<PlaybookStatus> => {
      const object = (await custom.getNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace,
        plural: PLURAL,
        name,
      })) as { status?: PlaybookStatus };
      return object.status ?? {};
    };
    const settled = async (side: Side, namespace: string, name: string): Promise<PlaybookStatus> => {
      const deadline = Date.now() + 600_000;
      for (;;) {
        const status = await getStatus(namespace, name);
        const ended = status.phase === "Succeeded" || status.phase === "Failed";
        const archived = status.conditions?.find((c) => c.type === LOG_ARCHIVED);
        if (ended && status.phase !== "Succeeded")
          throw new Error(`${namespace}/${name} ended ${status.phase}: ${JSON.stringify(status.conditions)}`);
        if (
          ended &&
          (side === "off" || (archived && archived.status !== "Unknown" && archived.reason !== "Archiving"))
        )
          return status;
        if (Date.now() > deadline)
          throw new Error(`${namespace}/${name} did not settle: ${JSON.stringify(status)}`);
        for (const list of podCpuLists?.() ?? []) podCpus.add(list);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    };

    let counter = 0;
    const runOnce = async (side: Side): Promise<Round> => {
      const namespace = namespaces[side];
      const name = `print-${++counter}`;
      const controller = controllers[side] as RunningController;
      const clusterBefore = readTreeCpu(roots, labels);
      const cpuBefore = processUsage(controller.process.pid).cpuSeconds;
      await custom.createNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace,
        plural: PLURAL,
        body: {
          apiVersion: `${GROUP}/${VERSION}`,
          kind: "Playbook",
          metadata: { name },
          spec: { ceiling: "10m", tasks: [{ name: TASK, run: generator() }] },
        },
      });
      const status = await settled(side, namespace, name);
      const controllerCpu = processUsage(controller.process.pid).cpuSeconds - cpuBefore;
      const clusterCpu = cpuByCommand(clusterBefore, readTreeCpu(roots, labels));
      const task = status.tasks?.find((t) => t.name === TASK);
      if (!task?.startTime || !task.completionTime)
        throw new Error(
          `${namespace}/${name}: no task times in status.tasks: ${JSON.stringify(status.tasks)}`,
        );
      const taskMs = Date.parse(task.completionTime) - Date.parse(task.startTime);
      let archivedBytes = 0;
      if (side === "on") {
        // What was measured must be a real archive, and its condition true to it: Archived with
        // every line in the object, or Incomplete (the kubelet's reader fell behind and skipped
        // part of the log) with lines missing.
        const archived = status.conditions?.find((c) => c.type === LOG_ARCHIVED);
        const said = archived?.reason;
        if (said !== "Archived" && said !== "Incomplete")
          throw new Error(
            `${namespace}/${name}: LogArchived ${archived?.status} ${archived?.reason}: ${archived?.message}`,
          );
        if (!status.log) throw new Error(`${namespace}/${name}: ${said} without status.log`);
        // Read whole and checked line by line, which on a loaded CPU takes longer than the store
        // client's 15 s deadline for a call.
        const object = await client.getObject(status.log.key, AbortSignal.timeout(READ_BACK_MS));
        if (!object) throw new Error(`${namespace}/${name}: no object at ${status.log.key}`);
        if (object.bytes !== status.log.bytes)
          throw new Error(
            `${status.log.key}: ${object.bytes} bytes in the store, status.log says ${status.log.bytes}`,
          );
        const lines = await taskLinesIn(object.body);
        // Measured all the same; a condition that is not true to the object fails the bench at its end.
        const whole = lines.count === LINES && lines.damaged.length === 0;
        const found = `${status.log.key} (${said}: ${archived?.message}): ${lines.count} of the task's ${LINES} lines archived whole; missing (first gaps) ${lines.gaps.join(", ") || "none"}; lines not whole ${lines.damaged.join(", ") || "none"}`;
        if (!whole) log(`INCOMPLETE: ${found}`);
        if (whole !== (said === "Archived")) untrue.push(found);
        if (said === "Incomplete") incompleteRuns += 1;
        archivedBytes = object.bytes;
      }
      // The run goes (with the archive on, its objects by the finalizer) and its pod with it before
      // the next run starts: neither deletion is counted in another run, and the node holds no more
      // than one run's log files.
      await custom.deleteNamespacedCustomObject({
        group: GROUP,
        version: VERSION,
        namespace,
        plural: PLURAL,
        name,
      });
      await waitFor(
        `${namespace}/${name} and its pod to be gone`,
        async () => {
          const left = await custom
            .getNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural: PLURAL, name })
            .then(
              () => true,
              () => false,
            );
          const pods = await core.listNamespacedPod({ namespace });
          return !left && pods.items.length === 0 ? true : undefined;
        },
        { timeoutMs: 180_000, intervalMs: 200 },
      );
      return {
        side,
        taskMs,
        controllerCpu,
        taskCpu: task.cpuSeconds ?? Number.NaN,
        archivedBytes,
        cluster: clusterCpu,
      };
    };

    log(`warming up (one run each of ${BYTES} bytes)`);
    await runOnce("on");
    await runOnce("off");
    const load = new MachineLoad();
    for (let round = 1; round <= ROUNDS; round++) {
      const order: Side[] = round % 2 === 1 ? ["on", "off"] : ["off", "on"];
      const got: Partial<Record<Side, Round>> = {};
      for (const side of order) got[side] = await runOnce(side);
      const on = got.on as Round;
      const off = got.off as Round;
      rounds.push(on, off);
      const mibs = (r: Round) => BYTES / MiB / (r.taskMs / 1000);
      log(
        `round ${round} (${order.join(", ")}): on ${fixed(mibs(on), 1)} MiB/s, off ${fixed(mibs(off), 1)} MiB/s, ratio ${fixed(mibs(on) / mibs(off))}; controller CPU on ${fixed(on.controllerCpu)} s, off ${fixed(off.controllerCpu)} s; task CPU on ${fixed(on.taskCpu)} s, off ${fixed(off.taskCpu)} s`,
      );
      const names = [...new Set([...on.cluster.keys(), ...off.cluster.keys()])]
        .filter((n) => (on.cluster.get(n) ?? 0) + (off.cluster.get(n) ?? 0) >= 0.05)
        .sort();
      log(
        `  CPU s by process (on / off): ${names.map((n) => `${n} ${fixed(on.cluster.get(n) ?? 0)} / ${fixed(off.cluster.get(n) ?? 0)}`).join(", ")}`,
      );
    }
    during = load.stop();
    client.destroy();
    if (cpuSplit) {
      const seen = [...podCpus].join(", ") || "none";
      // Else the pods shared the store's CPU, and its work would be counted as the node's.
      if (seen !== cpuSplit.node)
        throw new Error(`the node's pods were allowed CPUs ${seen}, not CPU ${cpuSplit.node} alone`);
      log(`the pods' processes were allowed CPU ${seen} alone`);
    }
  } finally {
    for (const controller of Object.values(controllers)) await controller.stop();
    await cluster.stop();
    // The store's data and the node's files go (hundreds of MB); the processes' logs stay.
    try {
      for (const entry of readdirSync(stateDir))
        if (entry !== "logs") rmSync(path.join(stateDir, entry), { recursive: true, force: true });
    } catch (error) {
      log(`could not remove all of ${stateDir}: ${error instanceof Error ? error.message : String(error)}`);
    }
    log(`the cluster's logs are in ${path.join(stateDir, "logs")}`);
  }
  report(rounds, during);
  log(`${incompleteRuns} of ${rounds.filter((r) => r.side === "on").length} archived runs said Incomplete`);
  if (untrue.length > 0)
    throw new Error(
      `${untrue.length} archived objects' LogArchived is not true to what they hold:\n${untrue.join("\n")}`,
    );
}

function report(rounds: Round[], during: LoadDuring | undefined): void {
  const on = rounds.filter((r) => r.side === "on");
  const off = rounds.filter((r) => r.side === "off");
  const mibs = (r: Round) => BYTES / MiB / (r.taskMs / 1000);
  const ratios = on.map((r, i) => mibs(r) / mibs(off[i] as Round));
  const size = `${fixed(BYTES / MiB, 0)} MiB of ${LINE}-byte lines`;
  const throughput = ComparisonSchema.parse({
    name: "archive_stdout_throughput",
    ours: median(on.map(mibs)),
    reference: median(off.map(mibs)),
    unit: "MiB/s",
    ratio: median(ratios),
    target: TARGET,
    note: `a task printing ${size} to stdout on a real node${cpuSplit ? ` whose processes and pods have CPU ${cpuSplit.node} to themselves (the control plane, the store and the relays on ${cpuSplit.controlPlane})` : " sharing every CPU with the control plane and the store"}, the archive on (--log-archive-upload=${UPLOAD}) against off (its own controller each), the task's time from status.tasks; median of ${ROUNDS} paired ratios (${range(ratios)}), rounds interleaved and their order alternated; every line checked in the archived object`,
    spread: { ours: spread(on.map(mibs)), reference: spread(off.map(mibs)), ratio: spread(ratios) },
    ...(during ? { load: during } : {}),
  });
  const cpuOn = median(on.map((r) => r.controllerCpu));
  const cpuOff = median(off.map((r) => r.controllerCpu));
  const archivedMib = median(on.map((r) => r.archivedBytes)) / MiB;
  const figures = [
    FigureSchema.parse({
      name: "archive_controller_cpu_per_run_on",
      value: cpuOn,
      unit: "s",
      note: `the controller's CPU (user + system) from a Playbook's creation until LogArchived True, one run printing ${size}; median of ${ROUNDS} (${range(on.map((r) => r.controllerCpu))})`,
    }),
    FigureSchema.parse({
      name: "archive_controller_cpu_per_run_off",
      value: cpuOff,
      unit: "s",
      note: `the same run with the archive off, until Succeeded; median of ${ROUNDS} (${range(off.map((r) => r.controllerCpu))})`,
    }),
    FigureSchema.parse({
      name: "archive_controller_cpu_per_archived_mib",
      value: ((cpuOn - cpuOff) / archivedMib) * 1000,
      unit: "ms/MiB",
      note: `(on - off) / the archived object's ${fixed(archivedMib, 1)} MiB`,
    }),
  ];
  // Each process's CPU per run, by side: the medians of the rounds.
  const names = [...new Set(rounds.flatMap((r) => [...r.cluster.keys()]))].sort();
  const byProcess = names
    .map((n) => {
      const a = median(on.map((r) => r.cluster.get(n) ?? 0));
      const b = median(off.map((r) => r.cluster.get(n) ?? 0));
      return { n, a, b };
    })
    .filter(({ a, b }) => a + b >= 0.05)
    .map(({ n, a, b }) => `${n} ${fixed(a)} / ${fixed(b)}`);
  for (const entry of [throughput, ...figures])
    if (RESULTS_FILE) appendFileSync(RESULTS_FILE, `${JSON.stringify(entry)}\n`);
  const loadLine = during
    ? `load over the rounds: 1-min average ${fixed(during.loadAverage1.min)} to ${fixed(during.loadAverage1.max)}, busy ${during.busyPercent ?? "?"}%, steal ${during.stealPercent ?? "?"}%`
    : "";
  process.stdout.write(
    `${throughput.name}: on ${fixed(throughput.ours ?? 0, 1)} MiB/s, off ${fixed(throughput.reference ?? 0, 1)} MiB/s, ratio ${fixed(throughput.ratio ?? 0)} (target ${TARGET}) ${meetsTarget(throughput.ratio, TARGET) ? "met" : "NOT met"}\n  ${throughput.note}\n` +
      `archive_controller_cpu_per_run: on ${fixed(cpuOn)} s, off ${fixed(cpuOff)} s; ${fixed(figures[2]?.value ?? 0, 1)} ms of the controller's CPU per archived MiB\n` +
      `  task CPU (the generator) median on ${fixed(median(on.map((r) => r.taskCpu)))} s, off ${fixed(median(off.map((r) => r.taskCpu)))} s\n` +
      `  CPU s per run by process, on / off (medians; the pods' own processes not counted): ${byProcess.join(", ")}\n` +
      `  ${loadLine}\n`,
  );
}

main().then(
  () => process.exit(0),
  (error) => {
    log(`failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    process.exit(1);
  },
);
