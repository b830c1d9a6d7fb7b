// `npm run bench:cron`: cron_schedule_delay_p99 (issue 22). On one control plane, 1,000 CronJobs
// (batch/v1) due at the same minute, each timed from its scheduled time to its Job created, by
// kube-controller-manager's CronJob controller (the control plane's own, at its default client
// limits); then 1,000 CronPlaybooks due at a later minute, each timed to its Playbook created, by
// our controller (its own process, as a deployment runs it). Both sides are timed alike, by this
// process's watch of the Jobs and Playbooks: the time the ADDED event arrived minus the scheduled
// time (milliseconds; creationTimestamp's whole seconds are printed beside). The resident memory
// of each controller (VmRSS from /proc) is read once its runs exist, with the 1,000 objects cached.
// Prints the table of test/bench/results.ts; `--json FILE` writes it; `--quick` (the smoke test)
// schedules 20 of each, both due at the same minute in namespaces of their own.
// The node is cordoned: no pod is run, and the Job controller is not running (only the Job's
// creation is measured); our controller does create its runs' pods, in the same process.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { z } from "zod";
import { type Api, inPool } from "./api.js";
import { AuditLog, summarizeWrites, type WriteSummary } from "./audit.js";
import {
  type BenchCluster,
  createNamespace,
  OUR_USER,
  processUsage,
  setNodeSchedulable,
  startBenchCluster,
  startOurController,
} from "./bench-cluster.js";
import {
  BenchResultsSchema,
  type Comparison,
  ComparisonSchema,
  compare,
  type Figure,
  formatResults,
} from "./results.js";
import { percentile, ratio } from "./stats.js";

const { values: flags } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    json: { type: "string" },
    count: { type: "string" },
    workers: { type: "string", default: "2" },
    "keep-cluster": { type: "boolean", default: false },
  },
});
const quick = flags.quick ?? false;
const COUNT = z.coerce
  .number()
  .int()
  .min(1)
  .parse(flags.count ?? (quick ? 20 : 1000));
const WORKERS = z.coerce.number().int().min(1).parse(flags.workers);
/** The least time between the first create and the minute they are due: creating 1,000 takes ~10 s. */
const LEAD_MS = quick ? 15_000 : 40_000;
/** How long after the due minute every run must exist. */
const GIVE_UP_MS = 600_000;

const log = (message: string) => process.stderr.write(`[bench:cron] ${message}\n`);
const rand = () => Math.random().toString(36).slice(2, 7);
const comparisons: Comparison[] = [];
const figures: Figure[] = [];

/** The first whole minute at least LEAD_MS from now (UTC), and the five-field schedule due only then. */
function nextDueMinute(after = Date.now()): { due: Date; schedule: string } {
  const due = new Date(Math.ceil((after + LEAD_MS) / 60_000) * 60_000);
  return { due, schedule: `${due.getUTCMinutes()} ${due.getUTCHours()} * * *` };
}

const cronJob = (name: string, schedule: string) => ({
  apiVersion: "batch/v1",
  kind: "CronJob",
  metadata: { name },
  spec: {
    schedule,
    timeZone: "Etc/UTC",
    suspend: false,
    concurrencyPolicy: "Allow",
    jobTemplate: {
      spec: {
        template: {
          spec: {
            restartPolicy: "Never",
            containers: [{ name: "work", image: "busybox", command: ["true"] }],
          },
        },
      },
    },
  },
});

const cronPlaybook = (name: string, schedule: string) => ({
  apiVersion: "playbook.dev/v1alpha1",
  kind: "CronPlaybook",
  metadata: { name },
  spec: {
    schedule,
    timeZone: "UTC",
    suspend: false,
    concurrencyPolicy: "Allow",
    template: { spec: { tasks: [{ name: "work", run: "true" }] } },
  },
});

const Created = z.looseObject({
  type: z.string(),
  object: z.looseObject({
    metadata: z.looseObject({
      name: z.string(),
      creationTimestamp: z.string().optional(),
      labels: z.record(z.string(), z.string()).optional(),
    }),
  }),
});

interface Seen {
  /** When this process received the ADDED event (ms since the epoch). */
  receivedAt: number;
  creationTimestamp: number;
}

/** Records each object of the collection as it is added, until `count` are or the signal aborts. */
function watchAdded(
  api: Api,
  collection: string,
  count: number,
  selector: (object: z.infer<typeof Created>["object"]) => boolean,
): { seen: Map<string, Seen>; done: Promise<void>; stop: () => void } {
  const seen = new Map<string, Seen>();
  const abort = new AbortController();
  let finish: () => void = () => {};
  const done = new Promise<void>((resolve) => {
    finish = resolve;
  });
  const loop = async () => {
    while (!abort.signal.aborted && seen.size < count) {
      await api
        .watchLines(`${collection}?watch=true`, abort.signal, (line) => {
          const receivedAt = Date.now();
          const event = Created.safeParse(JSON.parse(line));
          if (!event.success || event.data.type !== "ADDED") return;
          const { metadata } = event.data.object;
          if (!selector(event.data.object) || seen.has(metadata.name)) return;
          seen.set(metadata.name, {
            receivedAt,
            creationTimestamp: Date.parse(metadata.creationTimestamp ?? ""),
          });
          if (seen.size >= count) {
            finish();
            abort.abort();
          }
        })
        .catch((error: unknown) => {
          if (!abort.signal.aborted) log(`watch ${collection} broke, again: ${(error as Error).message}`);
        });
    }
    finish();
  };
  void loop();
  return { seen, done, stop: () => abort.abort() };
}

/** The identity kube-controller-manager's CronJob controller calls the API server with. */
const CRONJOB_CONTROLLER_USER = "system:serviceaccount:kube-system:cronjob-controller";

interface Side {
  /** The controller's writes from the due minute until the last run was seen. */
  writes: WriteSummary;
  /** Seconds from the scheduled time to the run seen created by the watch. */
  receipt: number[];
  /** Seconds from the scheduled time to the run's creationTimestamp (whole seconds). */
  created: number[];
  rssMb: number;
  createSeconds: number;
}

/** Creates `count` schedules due at one minute, waits for every run, and times each. */
async function measure(
  cluster: BenchCluster,
  what: string,
  options: {
    namespace: string;
    collection: string;
    runs: string;
    body: (name: string, schedule: string) => object;
    isRun: (object: z.infer<typeof Created>["object"]) => boolean;
    pid: () => number;
    user: string;
    due: { due: Date; schedule: string };
  },
): Promise<Side> {
  const audit = new AuditLog(cluster.auditLog);
  const { due, schedule } = options.due;
  const watch = watchAdded(cluster.api, options.runs, COUNT, options.isRun);
  const t0 = Date.now();
  await inPool(
    Array.from({ length: COUNT }, (_, i) => `s-${i}`),
    32,
    (name) => cluster.api.request("POST", options.collection, options.body(name, schedule)),
  );
  const createSeconds = (Date.now() - t0) / 1000;
  log(`${what}: ${COUNT} created in ${createSeconds.toFixed(1)}s, due ${due.toISOString()}`);
  if (Date.now() >= due.getTime()) throw new Error(`${what}: the creates took past the due minute`);
  const auditFrom = audit.mark();
  const timer = setTimeout(watch.stop, due.getTime() + GIVE_UP_MS - Date.now());
  await watch.done;
  clearTimeout(timer);
  if (watch.seen.size < COUNT)
    throw new Error(
      `${what}: ${watch.seen.size} of ${COUNT} runs within ${GIVE_UP_MS / 1000}s of the due minute`,
    );
  const rssMb = processUsage(options.pid()).rssMb;
  const writes = summarizeWrites(audit.since(auditFrom), options.user);
  const times = [...watch.seen.values()];
  const receipt = times.map((t) => (t.receivedAt - due.getTime()) / 1000);
  const created = times.map((t) => (t.creationTimestamp - due.getTime()) / 1000);
  log(
    `${what}: every run seen ${Math.max(...receipt).toFixed(1)}s after the due minute; p99 ${percentile(receipt, 99).toFixed(2)}s; RSS ${rssMb.toFixed(0)} MB`,
  );
  log(`${what}: writes ${JSON.stringify(writes.byVerbAndResource)}, ${writes.events} events`);
  return { receipt, created, rssMb, createSeconds, writes };
}

async function main(): Promise<void> {
  const startedAt = new Date().toISOString();
  const stateDir = mkdtempSync(path.join(tmpdir(), "playbook-bench-cron-"));
  const cluster = await startBenchCluster(stateDir, log);
  const stopOnSignal = () => {
    void cluster
      .stop()
      .finally(() => rmSync(stateDir, { recursive: true, force: true }))
      .finally(() => process.exit(130));
  };
  process.once("SIGINT", stopOnSignal);
  process.once("SIGTERM", stopOnSignal);
  let ours: Side;
  let reference: Side;
  try {
    // Runs stay Pending: no pod's life loads the cores the controllers are timed on.
    await setNodeSchedulable(cluster.api, false);
    const kcm = cluster.state.processes.find((p) => p.name === "kube-controller-manager");
    if (!kcm) throw new Error("no kube-controller-manager in the bench cluster");
    const refNamespace = `cron-ref-${rand()}`;
    const ourNamespace = `cron-ours-${rand()}`;
    await createNamespace(cluster.api, refNamespace);
    await createNamespace(cluster.api, ourNamespace);
    // Ours runs from the start, as the control plane's kube-controller-manager does: its caches
    // are synced before anything is created.
    const controller = await startOurController(cluster, { workers: WORKERS });
    try {
      const refDue = nextDueMinute();
      const refSide = () =>
        measure(cluster, "CronJobs (kube-controller-manager)", {
          namespace: refNamespace,
          collection: `/apis/batch/v1/namespaces/${refNamespace}/cronjobs`,
          runs: `/apis/batch/v1/namespaces/${refNamespace}/jobs`,
          body: cronJob,
          isRun: () => true,
          pid: () => kcm.pid,
          user: CRONJOB_CONTROLLER_USER,
          due: refDue,
        });
      const ourSide = (due: { due: Date; schedule: string }) =>
        measure(cluster, "CronPlaybooks (ours)", {
          namespace: ourNamespace,
          collection: `/apis/playbook.dev/v1alpha1/namespaces/${ourNamespace}/cronplaybooks`,
          runs: `/apis/playbook.dev/v1alpha1/namespaces/${ourNamespace}/playbooks`,
          body: cronPlaybook,
          isRun: (object) => object.metadata.labels?.["playbook.dev/cron-playbook"] !== undefined,
          pid: () => controller.process.pid,
          user: OUR_USER,
          due,
        });
      if (quick) {
        // The smoke test: a handful of each, due at one minute (what is checked is that it measures).
        [reference, ours] = await Promise.all([refSide(), ourSide(refDue)]);
      } else {
        reference = await refSide();
        // The next minute that leaves the CronJob side's writes behind.
        ours = await ourSide(nextDueMinute());
      }
    } finally {
      await controller.stop();
    }
  } finally {
    if (flags["keep-cluster"]) log(`Cluster left running: KUBECONFIG=${cluster.state.kubeconfig}`);
    else {
      await cluster.stop();
      rmSync(stateDir, { recursive: true, force: true });
    }
  }
  const scale = quick ? ` (--quick: ${COUNT} of each, due at the same minute)` : "";
  const add = (entry: Omit<Comparison, "ratio">) =>
    comparisons.push(ComparisonSchema.parse(compare(entry, ratio)));
  add({
    name: "cron_schedule_delay_p99",
    ours: percentile(ours.receipt, 99),
    reference: percentile(reference.receipt, 99),
    unit: "s",
    target: "<= 1.0",
    note: `${COUNT} CronPlaybooks due at one minute, from the scheduled time to each Playbook's ADDED event at this process's watch; reference: ${COUNT} CronJobs due at one minute, to each Job's, kube-controller-manager's CronJob controller at its default client limits (20 QPS, burst 30), same control plane${scale}`,
  });
  add({
    name: "cron_schedule_delay_p50",
    ours: percentile(ours.receipt, 50),
    reference: percentile(reference.receipt, 50),
    unit: "s",
    target: "<= 1.0",
    note: "as cron_schedule_delay_p99, the median",
  });
  const fig = (name: string, value: number, unit: string, note?: string) =>
    figures.push({ name, value, unit, ...(note ? { note } : {}) });
  fig(
    "cron_created_delay_p99_ours",
    percentile(ours.created, 99),
    "s",
    "from the scheduled time to the Playbook's creationTimestamp (whole seconds, the API server's clock)",
  );
  fig(
    "cron_created_delay_p99_cronjob",
    percentile(reference.created, 99),
    "s",
    "from the scheduled time to the Job's creationTimestamp (whole seconds)",
  );
  fig("cron_created_delay_p50_ours", percentile(ours.created, 50), "s");
  fig("cron_created_delay_p50_cronjob", percentile(reference.created, 50), "s");
  fig(
    `cron_controller_rss_mb_${COUNT}`,
    ours.rssMb,
    "MB",
    `VmRSS of our controller once its ${COUNT} runs existed, its ${COUNT} CronPlaybooks and runs cached (the chart's heap flags)`,
  );
  fig(
    `kube_controller_manager_rss_mb_${COUNT}`,
    reference.rssMb,
    "MB",
    `VmRSS of kube-controller-manager (every controller but the Job controller) once its ${COUNT} Jobs existed, its ${COUNT} CronJobs cached`,
  );
  const perRun = (side: Side) => side.writes.objectWrites / COUNT;
  const byVerb = (side: Side) =>
    Object.entries(side.writes.byVerbAndResource)
      .map(([key, n]) => `${key} ${n}`)
      .join(", ");
  fig(
    "cron_api_writes_per_run_ours",
    perRun(ours),
    "writes",
    `our controller's object writes (events apart) from the due minute to the last run, per run: ${byVerb(ours)}; ${ours.writes.events} events, ${ours.writes.conflicts} conflicts (the audit log)`,
  );
  fig(
    "cron_api_writes_per_run_cronjob",
    perRun(reference),
    "writes",
    `the CronJob controller's, the same way: ${byVerb(reference)}; ${reference.writes.events} events, ${reference.writes.conflicts} conflicts`,
  );
  fig(
    "cron_create_seconds_ours",
    ours.createSeconds,
    "s",
    `this process creating the ${COUNT} CronPlaybooks`,
  );
  fig(
    "cron_create_seconds_cronjob",
    reference.createSeconds,
    "s",
    `this process creating the ${COUNT} CronJobs`,
  );
  const results = BenchResultsSchema.parse({
    version: 1,
    quick,
    startedAt,
    finishedAt: new Date().toISOString(),
    machine: { cores: cpus().length, loadAverage: loadavg().map((l) => Math.round(l * 100) / 100) },
    comparisons,
    figures,
  });
  process.stdout.write(formatResults(results));
  if (flags.json) writeFileSync(flags.json, `${JSON.stringify(results, null, 2)}\n`);
}

await main();
