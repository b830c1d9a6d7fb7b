// The "Playbooks: timeouts" dashboard as Grafana imports it on its own. That every expression
// parses and returns data is proven against a real Prometheus in test/controller/prometheus.test.ts.

import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import {
  dashboardFile,
  dashboardQueries,
  exportedMetricNames,
  loadDashboard,
  playbookMetricsIn,
} from "../support/monitoring.js";

// biome-ignore lint/suspicious/noTemplateCurlyInString: Grafana's variable syntax, not a JavaScript template
const DATASOURCE = { type: "prometheus", uid: "${datasource}" };

const dashboard = loadDashboard();
const panels = dashboard.panels.filter((panel) => panel.type !== "row");
const queries = dashboardQueries(dashboard);

// The metrics that carry the Playbook's namespace as a label: each selection of them follows $namespace.
const NAMESPACED = [
  "playbook_runs_total",
  "playbook_limit_fired_total",
  "playbook_run_duration_seconds",
  "playbook_task_duration_seconds",
  "playbook_task_cpu_seconds",
  "playbook_task_peak_memory_bytes",
  "playbook_task_limit_usage_ratio",
  "playbook_active_runs",
  "playbook_queued_runs",
  "playbook_policy_refusals_total",
  "playbook_cron_runs_started_total",
  "playbook_cron_runs_skipped_total",
  "playbook_cron_runs_replaced_total",
  "playbook_cron_runs_missed_total",
  "playbook_cron_schedule_delay_seconds",
  "playbook_cron_stale",
  "playbook_runs_preempted_total",
  "playbook_queue_wait_seconds",
  "playbook_queue_budget_used_ratio",
];

describe("the Playbooks: timeouts dashboard", () => {
  it("has a stable uid, its title and a current schemaVersion", () => {
    expect(dashboard.uid).toBe("playbook-timeouts");
    expect(dashboard.title).toBe("Playbooks: timeouts");
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(39);
  });

  it("gives every panel, rows included, an id of its own", () => {
    const ids = dashboard.panels.map((panel) => panel.id);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it("lays panels out on the 24-column grid without overlaps", () => {
    for (const panel of dashboard.panels)
      expect(panel.gridPos.x + panel.gridPos.w, panel.title).toBeLessThanOrEqual(24);
    const overlaps: string[] = [];
    dashboard.panels.forEach((a, i) => {
      for (const b of dashboard.panels.slice(i + 1)) {
        const apart =
          a.gridPos.x + a.gridPos.w <= b.gridPos.x ||
          b.gridPos.x + b.gridPos.w <= a.gridPos.x ||
          a.gridPos.y + a.gridPos.h <= b.gridPos.y ||
          b.gridPos.y + b.gridPos.h <= a.gridPos.y;
        if (!apart) overlaps.push(`${a.title} / ${b.title}`);
      }
    });
    expect(overlaps).toEqual([]);
  });

  it("describes every panel and queries it through the datasource variable, not a fixed uid", () => {
    for (const panel of panels) {
      expect(panel.description?.length ?? 0, panel.title).toBeGreaterThan(20);
      expect(panel.datasource, panel.title).toEqual(DATASOURCE);
      expect(panel.targets?.length ?? 0, panel.title).toBeGreaterThan(0);
      for (const target of panel.targets ?? [])
        expect(target.datasource, `${panel.title} ${target.refId}`).toEqual(panel.datasource);
    }
  });

  it("gives every target an expression and a refId unique in its panel", () => {
    for (const panel of panels) {
      const refIds = (panel.targets ?? []).map((target) => target.refId);
      expect(new Set(refIds).size, panel.title).toBe(refIds.length);
      for (const target of panel.targets ?? []) expect(target.expr.trim(), panel.title).not.toBe("");
    }
  });

  it("has an interval variable for the rate window that never goes below four 30s scrapes", () => {
    const interval = dashboard.templating.list.find((variable) => variable.name === "interval");
    expect(interval).toMatchObject({ type: "interval", auto: true, auto_min: "2m" });
  });

  it("has a Prometheus datasource variable and a multi-value namespace variable with All", () => {
    const variables = new Map(dashboard.templating.list.map((variable) => [variable.name, variable]));
    expect(variables.get("datasource")).toMatchObject({ type: "datasource", query: "prometheus" });
    const namespace = variables.get("namespace");
    expect(namespace).toMatchObject({
      type: "query",
      multi: true,
      includeAll: true,
      datasource: DATASOURCE,
    });
    const query = namespace?.query;
    expect(typeof query === "string" ? query : query?.query).toBe(
      "label_values(playbook_runs_total, namespace)",
    );
  });

  it("takes rates over the interval variable and totals over $__range, never a fixed window", () => {
    for (const { panel, expr } of queries) {
      const windows = [...expr.matchAll(/\[([^\]]+)\]/g)].map((match) => match[1]);
      for (const window of windows)
        expect(["$interval", "$__range"], `${panel.title}: ${expr}`).toContain(window);
    }
  });

  it("follows the namespace variable wherever a metric has a namespace label", () => {
    for (const { panel, expr } of queries) {
      for (const name of NAMESPACED) {
        for (const match of expr.matchAll(
          new RegExp(`\\b${name}(_bucket|_count|_sum)?\\b(\\{[^}]*\\})?`, "g"),
        ))
          expect(match[2] ?? "", `${panel.title}: ${expr}`).toContain('namespace=~"$namespace"');
      }
    }
  });

  it("selects only metrics the controller exports", async () => {
    const exported = await exportedMetricNames();
    const used = new Set(queries.flatMap(({ expr }) => playbookMetricsIn(expr)));
    expect([...used].filter((name) => !exported.has(name))).toEqual([]);
    // The panels the dashboard exists for.
    for (const name of [
      "playbook_limit_fired_total",
      "playbook_runs_total",
      "playbook_task_limit_usage_ratio_bucket",
      "playbook_task_cpu_seconds_bucket",
      "playbook_task_peak_memory_bytes_bucket",
      "playbook_active_runs",
      "playbook_queued_runs",
      "playbook_policy_refusals_total",
      "playbook_leader",
      "playbook_ready",
      "playbook_cron_runs_started_total",
      "playbook_cron_runs_skipped_total",
      "playbook_cron_runs_replaced_total",
      "playbook_cron_runs_missed_total",
      "playbook_cron_schedule_delay_seconds_bucket",
      "playbook_cron_stale",
      "playbook_runs_preempted_total",
      "playbook_queue_wait_seconds_bucket",
      "playbook_queue_budget_used_ratio",
    ])
      expect(used).toContain(name);
  });

  it("links the runs that time out to the way to read their logs, from the pod or the log archive", () => {
    const raw = JSON.parse(readFileSync(dashboardFile, "utf8")) as {
      links: { title: string; url: string; tooltip?: string }[];
      panels: { title: string; fieldConfig?: { defaults?: { links?: { title: string; url: string }[] } } }[];
    };
    const reading = "docs/log-archive.md#reading-an-archived-log";
    expect(raw.links.find((link) => link.url.endsWith(reading))?.tooltip).toContain(
      "kubectl playbook logs NAME -n NAMESPACE",
    );
    for (const title of ["Namespaces that time out most", "Playbooks that time out most"]) {
      const links = raw.panels.find((panel) => panel.title === title)?.fieldConfig?.defaults?.links ?? [];
      expect(links.map((link) => link.title).join(" "), title).toContain(
        // biome-ignore lint/suspicious/noTemplateCurlyInString: Grafana's field label, not a JavaScript template
        "kubectl playbook logs NAME -n ${__field.labels.namespace}",
      );
      for (const link of links) expect(link.url, title).toMatch(new RegExp(`${reading}$`));
    }
  });

  it("says on the per-Playbook panels that they need --metrics-playbook-label", () => {
    const perPlaybook = panels.filter((panel) =>
      panel.targets?.some((target) => target.expr.includes("playbook!=")),
    );
    expect(perPlaybook.map((panel) => panel.title)).toEqual([
      "Playbooks that time out most",
      "Playbooks with most near misses",
      "Task p99 against its timeout: $playbook",
    ]);
    for (const panel of perPlaybook) expect(panel.description).toContain("--metrics-playbook-label");
  });

  it("repeats the headroom panel per Playbook: each task's p99 against its timeout, from the usage histogram, needing the task label", () => {
    const raw = JSON.parse(readFileSync(dashboardFile, "utf8")) as {
      panels: {
        title: string;
        repeat?: string;
        fieldConfig?: { defaults?: { unit?: string; max?: number } };
      }[];
    };
    const headroom = raw.panels.find((panel) => panel.title.startsWith("Task p99 against its timeout"));
    expect(headroom).toMatchObject({
      repeat: "playbook",
      fieldConfig: { defaults: { unit: "percentunit", max: 1 } },
    });
    const panel = panels.find((p) => p.title === headroom?.title);
    expect(panel?.description).toContain("--metrics-task-label");
    expect(panel?.targets?.[0]?.expr).toMatch(
      /^histogram_quantile\(0\.99, sum by \(le, task\) \(increase\(playbook_task_limit_usage_ratio_bucket\{.*playbook=~"\$playbook".*limit="TaskTimeout".*\}\[\$__range\]\)\)\)$/,
    );
    const variable = dashboard.templating.list.find((v) => v.name === "playbook");
    expect(variable).toMatchObject({ type: "query", multi: true, includeAll: true, allValue: ".+" });
  });
});
