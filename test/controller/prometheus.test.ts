// The dashboard and the alerts on a real Prometheus: a controller in this process runs Playbooks
// that end by each limit and one that succeeds close to its timeout, Prometheus scrapes it every
// second and evaluates the alert rules, and every dashboard and alert expression is queried
// through Prometheus' HTTP API as Grafana and the rule manager would. The runs' pods live on the
// scripted node: each case writes its pod's life (the runner's report with exact task times, or
// the kubelet's deadline), so the near-miss ratio is exactly the one the case names.
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { z } from "zod";
import { CRON_PLURAL, scheduledRunName } from "../../src/api/cron-playbook.js";
import { GROUP, PLURAL, VERSION } from "../../src/api/playbook.js";
import type { Clock } from "../../src/runtime/clock.js";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import {
  freePort,
  logTail,
  type StartedProcess,
  startProcess,
  stopProcess,
  waitFor,
} from "../harness/processes.js";
import {
  exceedDeadline,
  reportFor,
  reportPod,
  scheduledPod,
  scriptManually,
  startPod,
} from "../harness/scripted-node.js";
import { startCli } from "../support/cli.js";
import {
  type AlertRule,
  dashboardQueries,
  loadAlertRules,
  type PanelQuery,
  rulesFile,
  substituteVariables,
} from "../support/monitoring.js";
import {
  clients,
  condition,
  eventually,
  playbookManifest,
  type RunningController,
  startController,
  waitForFinished,
} from "./support.js";

const { core, custom } = clients();
const PLAYBOOK_LABEL = "app.kubernetes.io/name";

let namespace: string;
let controller: RunningController;
let metricsUrl: string;
let prometheus: StartedProcess | undefined;
let prometheusUrl: string;
let workDir: string;

/** The controller's schedule clock: real time plus an offset, so a scheduled run comes at once. */
const scheduleClock = new (class implements Clock {
  offsetMs = 0;
  now(): Date {
    return new Date(Date.now() + this.offsetMs);
  }
})();

beforeAll(async () => {
  namespace = await createTestNamespace(core, "pb-prom");
  const metricsPort = await freePort();
  metricsUrl = `http://127.0.0.1:${metricsPort}`;
  controller = startController(
    [namespace],
    {
      metricsAddress: `127.0.0.1:${metricsPort}`,
      metricsPlaybookLabel: PLAYBOOK_LABEL,
      metricsTaskLabel: true,
    },
    undefined,
    scheduleClock,
  );

  workDir = mkdtempSync(path.join(tmpdir(), "pb-prometheus-"));
  const configFile = path.join(workDir, "prometheus.yml");
  // honor_labels: the metrics' own `namespace` (the Playbook's) must win over a target label, as
  // the chart's ServiceMonitor must keep it.
  writeFileSync(
    configFile,
    JSON.stringify({
      global: { scrape_interval: "1s", evaluation_interval: "1s" },
      rule_files: [rulesFile],
      scrape_configs: [
        {
          job_name: "playbook-controller",
          honor_labels: true,
          static_configs: [{ targets: [`127.0.0.1:${metricsPort}`] }],
        },
      ],
    }),
  );
  const port = await freePort();
  prometheusUrl = `http://127.0.0.1:${port}`;
  const logFile = path.join(workDir, "prometheus.log");
  prometheus = startProcess(
    "prometheus",
    process.env.PROMETHEUS ?? "prometheus",
    [
      `--config.file=${configFile}`,
      `--storage.tsdb.path=${path.join(workDir, "data")}`,
      `--web.listen-address=127.0.0.1:${port}`,
      "--log.level=warn",
    ],
    { logFile },
  );
  let exited = false;
  void prometheus.exited.then(() => (exited = true));
  await waitFor(
    "Prometheus to be ready",
    async () => ((await fetch(`${prometheusUrl}/-/ready`)).ok ? true : undefined),
    {
      timeoutMs: 30_000,
      intervalMs: 200,
      abortIf: () => (exited ? `exited: ${logTail(logFile)}` : undefined),
    },
  );
  await waitFor(
    "the controller to be scraped",
    async () => ((await query("up")).some((s) => s.value === 1) ? true : undefined),
    { timeoutMs: 30_000, intervalMs: 500 },
  );
});

afterAll(async () => {
  if (prometheus) await stopProcess(prometheus);
  if (workDir) rmSync(workDir, { recursive: true, force: true });
  await controller?.stop();
  await deleteTestNamespace(core, namespace);
});

const QueryResponse = z.discriminatedUnion("status", [
  z.object({
    status: z.literal("success"),
    data: z.object({
      resultType: z.string(),
      result: z.array(
        z.object({ metric: z.record(z.string(), z.string()), value: z.tuple([z.number(), z.string()]) }),
      ),
    }),
  }),
  z.object({ status: z.literal("error"), errorType: z.string(), error: z.string() }),
]);

interface Sample {
  labels: Record<string, string>;
  value: number;
}

/** An instant query; throws with Prometheus' message when the expression does not parse or evaluate. */
async function query(expr: string): Promise<Sample[]> {
  const response = await fetch(`${prometheusUrl}/api/v1/query`, {
    method: "POST",
    body: new URLSearchParams({ query: expr }),
  });
  const parsed = QueryResponse.parse(await response.json());
  if (parsed.status === "error") throw new Error(`${parsed.errorType}: ${parsed.error}\n${expr}`);
  return parsed.data.result.map((r) => ({ labels: r.metric, value: Number(r.value[1]) }));
}

const sumOf = async (expr: string) => (await query(`sum(${expr})`))[0]?.value ?? 0;

interface RunCase {
  app: string;
  reason: string;
  spec: Record<string, unknown>;
  /** The pod's life on the scripted node, from bound to ended, as the runner and the kubelet would write it. */
  life: (pod: V1Pod) => Promise<void>;
}

/** Running, then ended by the runner's report for `reason`, its deciding task having taken `tookMs`. */
const reported =
  (reason: "Succeeded" | "TaskTimeout" | "StallLimit" | "RunCeiling", tookMs: number) =>
  async (pod: V1Pod) => {
    const completionTime = new Date();
    const startTime = new Date(completionTime.getTime() - tookMs);
    await startPod(core, pod, startTime);
    // The runner measures what each task cost (the task CPU and peak memory panels).
    const figures = { cpuSeconds: tookMs / 2000, peakMemoryBytes: 64 << 20 };
    await reportPod(core, pod, reportFor(pod, { reason, startTime, completionTime, tasks: { 0: figures } }));
  };

const cases: RunCase[] = [
  {
    // Uses 93% of its timeout: a near miss.
    app: "nightly-ok",
    reason: "Succeeded",
    spec: { ceiling: "1m", tasks: [{ name: "close-call", run: "sleep 9.3", timeout: "10s" }] },
    life: reported("Succeeded", 9_300),
  },
  {
    app: "nightly-timeout",
    reason: "TaskTimeout",
    spec: { ceiling: "1m", killGrace: "1s", tasks: [{ name: "slow", run: "sleep 30", timeout: "2s" }] },
    life: reported("TaskTimeout", 2_000),
  },
  {
    app: "nightly-stall",
    reason: "StallLimit",
    spec: {
      ceiling: "1m",
      killGrace: "1s",
      stall: "2s",
      tasks: [{ name: "quiet", run: "echo start; sleep 30" }],
    },
    life: reported("StallLimit", 2_000),
  },
  {
    app: "nightly-ceiling",
    reason: "RunCeiling",
    spec: { ceiling: "3s", killGrace: "1s", tasks: [{ name: "long", run: "sleep 30" }] },
    life: reported("RunCeiling", 3_000),
  },
  {
    // The runner froze and never reported: only the kubelet's activeDeadlineSeconds ends the pod.
    app: "nightly-frozen",
    reason: "PodDeadlineExceeded",
    spec: { ceiling: "6s", killGrace: "1s", tasks: [{ name: "held", run: "sleep 60" }] },
    life: async (pod) => {
      // Written here, not by the node's own deadline duty, so that it is written once.
      await scriptManually(core, pod);
      const deadlineMs = (pod.spec?.activeDeadlineSeconds ?? 0) * 1000;
      await startPod(core, pod, new Date(Date.now() - deadlineMs));
      await exceedDeadline(core, pod);
    },
  },
];

async function runToTheEnd(c: RunCase, wave: number): Promise<void> {
  const name = `${c.app}-${wave}`;
  const manifest = playbookManifest(name, c.spec);
  await custom.createNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    plural: PLURAL,
    namespace,
    body: { ...manifest, metadata: { name, labels: { [PLAYBOOK_LABEL]: c.app } } },
  });
  await c.life(await scheduledPod(core, namespace, `${name}-1`));
  const playbook = await waitForFinished(namespace, name, 60_000);
  expect(condition(playbook, "Succeeded")?.reason, name).toBe(c.reason);
}

/**
 * A CronPlaybook's scheduled run, to its end: the schedule clock moved 5 s past the next hour, so
 * the run is created 5 s after its scheduled time as the controller sees it (the delay histogram).
 */
async function scheduledRunToTheEnd(): Promise<void> {
  const name = "nightly-cron";
  await custom.createNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    plural: CRON_PLURAL,
    namespace,
    body: {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: "CronPlaybook",
      metadata: { name },
      spec: {
        schedule: "0 * * * *",
        concurrencyPolicy: "Forbid",
        template: {
          metadata: { labels: { [PLAYBOOK_LABEL]: name } },
          spec: { ceiling: "1m", tasks: [{ name: "backup", run: "true" }] },
        },
      },
    },
  });
  const at = new Date((Math.floor(Date.now() / 3_600_000) + 1) * 3_600_000);
  scheduleClock.offsetMs = at.getTime() + 5_000 - Date.now();
  controller.controller.resync();
  const run = scheduledRunName(name, at);
  await reported("Succeeded", 100)(await scheduledPod(core, namespace, `${run}-1`));
  const playbook = await waitForFinished(namespace, run, 60_000);
  expect(condition(playbook, "Succeeded")?.reason, run).toBe("Succeeded");
}

/** Runs every case once and waits until Prometheus has scraped all of them. */
async function wave(n: number): Promise<void> {
  await Promise.all([
    ...cases.map((c) => runToTheEnd(c, n)),
    // One scheduled run, in the first wave.
    ...(n === 1 ? [scheduledRunToTheEnd()] : []),
  ]);
  const runs = cases.length * n + 1;
  await waitFor(
    `Prometheus to have scraped ${runs} runs`,
    async () => ((await sumOf(`playbook_runs_total{namespace="${namespace}"}`)) === runs ? true : undefined),
    { timeoutMs: 30_000, intervalMs: 500 },
  );
}

// Grafana's values: the test namespace for $namespace, windows that cover both waves.
const VARIABLES = { rateInterval: "2m", range: "10m" };

// Panels that may be empty after a short healthy run, and why.
const MAY_BE_EMPTY = new Map([
  ["Watch reconnects and relists/A", "a reconnect series exists only once a watch has been restarted"],
  // Kueue's panels: no run here goes through Kueue, so their queries are parsed and evaluated
  // but have no series to answer from. The budget gauge's series are fed to the alert on it in
  // its promtool test (alerts/playbook-controller.rules.test.yaml).
  ["Queue wait p50 / p90, by queue/A", "a queue wait is observed only when Kueue admits a run's pod"],
  ["Queue wait p50 / p90, by queue/B", "a queue wait is observed only when Kueue admits a run's pod"],
  [
    "Queue budget used by the longest-waiting run, by queue/A",
    "the gauge has a series only while Kueue holds a run that has a queueTimeout",
  ],
]);

describe("the dashboard and the alerts on a real Prometheus scraping the controller", () => {
  const results = new Map<string, Sample[]>();
  const key = (q: Pick<PanelQuery, "refId"> & { panel: { title: string } }) => `${q.panel.title}/${q.refId}`;
  const resultOf = (title: string, refId = "A") => results.get(`${title}/${refId}`) ?? [];

  beforeAll(async () => {
    // A counter's series starts at its first increment: the second wave is what rate() and
    // increase() see.
    await wave(1);
    await wave(2);
    for (const q of dashboardQueries()) {
      const expr = substituteVariables(q.expr, { ...VARIABLES, namespace });
      results.set(key(q), await query(expr));
    }
  }, 300_000);

  it("the controller's /metrics passes promtool check metrics, but for prom-client's Node gauges", async () => {
    const text = await (await fetch(`${metricsUrl}/metrics`)).text();
    const { code, output } = await new Promise<{ code: number; output: string }>((resolve) => {
      const child = execFile("promtool", ["check", "metrics"], (error, stdout, stderr) =>
        resolve({ code: error ? Number(error.code ?? 1) : 0, output: stdout + stderr }),
      );
      child.stdin?.end(text);
    });
    // prom-client's default collectors name these gauges *_total; the names are theirs, not ours.
    expect(output.trim().split("\n").sort()).toEqual([
      'nodejs_active_handles_total non-counter metrics should not have "_total" suffix',
      'nodejs_active_requests_total non-counter metrics should not have "_total" suffix',
      'nodejs_active_resources_total non-counter metrics should not have "_total" suffix',
    ]);
    expect(code).toBe(3);
  });

  it("parses and evaluates every dashboard expression, and every panel returns data", () => {
    const queries = dashboardQueries();
    expect(results.size).toBe(queries.length);
    const empty = queries.map(key).filter((k) => (results.get(k) ?? []).length === 0 && !MAY_BE_EMPTY.has(k));
    expect(empty).toEqual([]);
  });

  it("counts each limit that fired and each reason in range", () => {
    const byLimit = Object.fromEntries(
      resultOf("Limits fired in range, by limit").map((s) => [s.labels.limit, s.value]),
    );
    for (const limit of ["TaskTimeout", "StallLimit", "RunCeiling", "PodDeadlineExceeded"])
      expect(byLimit[limit], limit).toBeGreaterThan(0);
    const byReason = resultOf("Runs in range, by reason").map((s) => s.labels.reason);
    expect(byReason).toEqual(expect.arrayContaining(cases.map((c) => c.reason)));
    expect(resultOf("Limits fired")[0]?.value).toBeGreaterThan(0);
    expect(resultOf("Runs failed")[0]?.value).toBeGreaterThan(0);
  });

  it("names the namespace and the Playbooks that time out most", () => {
    expect(resultOf("Namespaces that time out most").map((s) => s.labels.namespace)).toEqual([namespace]);
    const playbooks = resultOf("Playbooks that time out most").map((s) => s.labels.playbook);
    expect(playbooks.sort()).toEqual([
      "nightly-ceiling",
      "nightly-frozen",
      "nightly-stall",
      "nightly-timeout",
    ]);
  });

  it("shows the task that used over 90% of its timeout as a near miss", () => {
    const share = (refId: string) =>
      resultOf("Near misses: share of finished tasks over 80% / 90% of their limit", refId).find(
        (s) => s.labels.limit === "TaskTimeout",
      )?.value;
    expect(share("A")).toBe(1);
    expect(share("B")).toBe(1);
    expect(resultOf("Namespaces with most near misses").map((s) => s.labels.namespace)).toEqual([namespace]);
    expect(resultOf("Playbooks with most near misses").map((s) => s.labels.playbook)).toEqual(["nightly-ok"]);
  });

  it("fills the namespace variable as Grafana asks for label_values(playbook_runs_total, namespace)", async () => {
    const url = `${prometheusUrl}/api/v1/label/namespace/values?${new URLSearchParams({ "match[]": "playbook_runs_total" })}`;
    const body = z.object({ data: z.array(z.string()) }).parse(await (await fetch(url)).json());
    expect(body.data).toContain(namespace);
  });

  it("shows one replica up, ready and leading, and no run active", () => {
    expect(resultOf("Controller replicas", "A")[0]?.value).toBe(1);
    expect(resultOf("Controller replicas", "B")[0]?.value).toBe(1);
    expect(resultOf("Leader")[0]?.value).toBe(1);
    expect(resultOf("Active runs")[0]?.value).toBe(0);
  });

  it("evaluates every alert expression, and the rule manager reports every rule healthy", async () => {
    const rules: AlertRule[] = loadAlertRules();
    for (const rule of rules) await query(rule.expr);
    const RulesResponse = z.object({
      data: z.object({
        groups: z.array(
          z.object({
            rules: z.array(
              z.object({ name: z.string(), health: z.string(), lastError: z.string().optional() }),
            ),
          }),
        ),
      }),
    });
    const loaded = await eventually("every rule evaluated", async () => {
      const body = RulesResponse.parse(await (await fetch(`${prometheusUrl}/api/v1/rules`)).json());
      const all = body.data.groups.flatMap((g) => g.rules);
      return all.every((r) => r.health !== "unknown") ? all : undefined;
    });
    // Prometheus lists groups by name, not in file order.
    expect(loaded.map((r) => r.name).sort()).toEqual(rules.map((r) => r.alert).sort());
    expect(loaded.filter((r) => r.health !== "ok")).toEqual([]);
  });

  it("fires PlaybookRunCeilingHit and PlaybookPodDeadlineExceeded for their Playbooks, and nothing else", async () => {
    const AlertsResponse = z.object({
      data: z.object({
        alerts: z.array(
          z.object({
            labels: z.record(z.string(), z.string()),
            annotations: z.record(z.string(), z.string()),
            state: z.string(),
          }),
        ),
      }),
    });
    // The rule manager fires on the first ceiling run and rewrites the description at each
    // evaluation: both runs are counted once the second one's scrape was evaluated.
    const firing = await eventually("both alerts to fire, counting both ceiling runs", async () => {
      const body = AlertsResponse.parse(await (await fetch(`${prometheusUrl}/api/v1/alerts`)).json());
      const alerts = body.data.alerts.filter((a) => a.state === "firing");
      const ceiling = alerts.find((a) => a.labels.alertname === "PlaybookRunCeilingHit");
      return alerts.length >= 2 && ceiling?.annotations.description?.includes("minutes (2)")
        ? alerts
        : undefined;
    });
    expect(
      firing
        .map((a) => ({
          alertname: a.labels.alertname,
          namespace: a.labels.namespace,
          playbook: a.labels.playbook,
          severity: a.labels.severity,
        }))
        .sort((a, b) => String(a.alertname).localeCompare(String(b.alertname))),
    ).toEqual([
      {
        alertname: "PlaybookPodDeadlineExceeded",
        namespace,
        playbook: "nightly-frozen",
        severity: "warning",
      },
      { alertname: "PlaybookRunCeilingHit", namespace, playbook: "nightly-ceiling", severity: "warning" },
    ]);
    // Both ceiling runs of the Playbook, named as on-call reads them.
    const ceiling = firing.find((a) => a.labels.alertname === "PlaybookRunCeilingHit");
    expect(ceiling?.annotations.description).toContain(
      `Runs of Playbook nightly-ceiling in namespace ${namespace} reached their ceiling in the last 15 minutes (2)`,
    );
  });
});

/** Seconds each advised run's tasks took: fetch 4 in (1s, 5s], 7 in (5s, 15s], 1 in (15s, 30s]; build 4 in (30s, 1m], 8 in (1m, 5m]. */
const FETCH_S = [2, 3, 3.5, 4, 6, 7, 8, 9, 10, 12, 13, 20];
const BUILD_S = [40, 45, 50, 55, 70, 80, 90, 100, 130, 150, 200, 250];
const ADVISED = "advised";

/** Run i of the advised Playbook (generateName advised-, so advise -l groups them), to its end. */
async function advisedRun(i: number): Promise<void> {
  const created = (await custom.createNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    plural: PLURAL,
    namespace,
    body: {
      ...playbookManifest("unused", {
        ceiling: "1h",
        tasks: [
          { name: "fetch", run: "true", timeout: "2m" },
          { name: "build", run: "true", timeout: "10m" },
        ],
      }),
      metadata: { generateName: `${ADVISED}-`, labels: { [PLAYBOOK_LABEL]: ADVISED } },
    },
  })) as { metadata: { name: string } };
  const name = created.metadata.name;
  const pod = await scheduledPod(core, namespace, `${name}-1`);
  const completionTime = new Date();
  const buildStart = new Date(completionTime.getTime() - (BUILD_S[i] as number) * 1000);
  const fetchStart = new Date(buildStart.getTime() - (FETCH_S[i] as number) * 1000);
  await startPod(core, pod, fetchStart);
  await reportPod(
    core,
    pod,
    reportFor(pod, {
      reason: "Succeeded",
      startTime: fetchStart,
      completionTime,
      tasks: {
        0: { startTime: fetchStart, completionTime: buildStart },
        1: { startTime: buildStart, completionTime },
      },
    }),
  );
  const playbook = await waitForFinished(namespace, name, 60_000);
  expect(condition(playbook, "Succeeded")?.reason, name).toBe("Succeeded");
}

const Range = z.object({ lowerMs: z.number(), upperMs: z.number().nullable(), interpolatedMs: z.number() });
const HistogramLimit = z.object({
  n: z.number(),
  p50: Range.nullable(),
  p95: Range.nullable(),
  p99: Range.nullable(),
  proposalMs: z.number().nullable(),
});
const HistogramJson = z.object({
  runs: z.number(),
  ceiling: HistogramLimit,
  tasks: z.array(z.object({ name: z.string(), timeout: HistogramLimit })),
  perTask: z.boolean(),
});
const ObjectLimit = z.object({
  n: z.number(),
  p50: z.number().nullable(),
  p95: z.number().nullable(),
  p99: z.number().nullable(),
  quantile: z.number().nullable(),
});
const ObjectsJson = z.object({
  runs: z.number(),
  ceiling: ObjectLimit,
  tasks: z.array(z.object({ name: z.string(), timeout: ObjectLimit })),
});

describe("playbook advise --prometheus on the controller's histograms of real runs", () => {
  let kubeconfig: string;
  const cli = (args: string[]) => startCli(args, { env: { KUBECONFIG: kubeconfig } });
  const selector = `${PLAYBOOK_LABEL}=${ADVISED}`;

  beforeAll(async () => {
    kubeconfig = inject("kubeconfig");
    for (let i = 0; i < FETCH_S.length; i += 4) await Promise.all([0, 1, 2, 3].map((k) => advisedRun(i + k)));
    const scraped = `playbook_run_duration_seconds_count{namespace="${namespace}", playbook="${ADVISED}"}`;
    let seen = 0;
    await waitFor(
      `Prometheus to have scraped the ${FETCH_S.length} advised runs`,
      async () => {
        seen = await sumOf(scraped);
        return seen >= FETCH_S.length ? true : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 500 },
    ).catch(async (error: Error) => {
      const series = await query(scraped);
      throw new Error(`${error.message}: ${seen} seen; ${JSON.stringify(series)}`);
    });
  }, 300_000);

  it("gives each figure within the bucket the histogram puts it in, and the same sample as the objects", async () => {
    const common = ["advise", "-l", selector, "-n", namespace, "--half-life", "0", "-o", "json"];
    const fromObjects = await cli(common);
    expect(fromObjects.stderr).toBe("");
    expect(fromObjects.code).toBe(0);
    const objects = ObjectsJson.parse(JSON.parse(fromObjects.stdout));
    const fromPrometheus = await cli([...common, "--prometheus", prometheusUrl, "--window", "20m"]);
    expect(fromPrometheus.stderr).toBe("");
    expect(fromPrometheus.code).toBe(0);
    const histograms = HistogramJson.parse(JSON.parse(fromPrometheus.stdout));
    expect(histograms.perTask).toBe(true);
    expect(histograms.runs).toBe(FETCH_S.length);
    expect(objects.runs).toBe(FETCH_S.length);
    const within = (label: string, value: number | null, range: z.infer<typeof Range> | null) => {
      expect(value, label).not.toBeNull();
      expect(range, label).not.toBeNull();
      expect(value as number, label).toBeGreaterThan(range?.lowerMs as number);
      expect(value as number, label).toBeLessThanOrEqual(range?.upperMs ?? Number.POSITIVE_INFINITY);
    };
    for (const name of ["fetch", "build"]) {
      const object = objects.tasks.find((t) => t.name === name)?.timeout;
      const histogram = histograms.tasks.find((t) => t.name === name)?.timeout;
      expect(histogram?.n, name).toBe(object?.n);
      for (const p of ["p50", "p95", "p99"] as const)
        within(`${name} ${p}`, object?.[p] ?? null, histogram?.[p] ?? null);
      // The proposal starts from the bucket's upper bound: it never lies under the objects' quantile.
      expect(histogram?.proposalMs ?? 0, name).toBeGreaterThanOrEqual(
        object?.quantile ?? Number.POSITIVE_INFINITY,
      );
    }
    // By hand: fetch's p50 (rank 6) is the 6th shortest, 7s, in (5s, 15s]; build's p99 the longest, 250s, in (1m, 5m].
    expect(histograms.tasks.find((t) => t.name === "fetch")?.timeout.p50).toMatchObject({
      lowerMs: 5000,
      upperMs: 15_000,
    });
    expect(histograms.tasks.find((t) => t.name === "build")?.timeout.p99).toMatchObject({
      lowerMs: 60_000,
      upperMs: 300_000,
    });
    expect(histograms.ceiling.n).toBe(objects.ceiling.n);
    for (const p of ["p50", "p95", "p99"] as const)
      within(`run ${p}`, objects.ceiling[p], histograms.ceiling[p]);
  });

  it("prints the bucket beside each figure, and --explain says the quantiles are interpolated within a bucket", async () => {
    const args = [
      "advise",
      "-l",
      selector,
      "-n",
      namespace,
      "--prometheus",
      prometheusUrl,
      "--window",
      "20m",
    ];
    const table = await cli(args);
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/timeout build +12 +0 +\S+ \(1m, 5m\] +\S+ \(1m, 5m\]/);
    expect(table.stdout).toContain("No stall: the histograms hold no silences");
    const explain = await cli([...args, "--explain"]);
    expect(explain.stdout).toContain("histogram_quantile() interpolates linearly inside it");
    expect(explain.stdout).toMatch(/Task build's timeout: now 10m \(spec.tasks\[1\].timeout\)/);
  });

  it("names the URL, the namespace and the values there when no series has the Playbook's value", async () => {
    const result = await cli([
      "advise",
      "--prometheus",
      prometheusUrl,
      "--playbook",
      "no-such",
      "-n",
      namespace,
      "--window",
      "20m",
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(
      `--prometheus ${prometheusUrl}: no finished run of playbook="no-such" in namespace ${namespace} in the last 20m`,
    );
    expect(result.stderr).toContain(`"${ADVISED}"`);
  });
});
