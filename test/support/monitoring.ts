// The chart's dashboard and alert rules as the monitoring tests read them: parsed with zod, with
// every PromQL expression they hold, and the metric names the controller exports.
import { readFileSync } from "node:fs";
import path from "node:path";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { ControllerMetrics } from "../../src/controller/metrics.js";

const chartDir = path.join(import.meta.dirname, "../../charts/playbook-controller");
export const dashboardFile = path.join(chartDir, "dashboards/playbook-timeouts.json");
export const rulesFile = path.join(chartDir, "alerts/playbook-controller.rules.yaml");
export const rulesTestFile = path.join(chartDir, "alerts/playbook-controller.rules.test.yaml");
export const runbookFile = path.join(chartDir, "RUNBOOK.md");

const DatasourceRef = z.object({ type: z.string(), uid: z.string() });

const Target = z.object({
  refId: z.string().min(1),
  expr: z.string().min(1),
  datasource: DatasourceRef,
  legendFormat: z.string().optional(),
});

const GridPos = z.object({
  x: z.number().int().min(0),
  y: z.number().int().min(0),
  w: z.number().int().min(1).max(24),
  h: z.number().int().min(1),
});

const Panel = z.object({
  id: z.number().int(),
  type: z.string(),
  title: z.string().min(1),
  description: z.string().optional(),
  datasource: DatasourceRef.optional(),
  gridPos: GridPos,
  targets: z.array(Target).optional(),
});
export type Panel = z.infer<typeof Panel>;

const Variable = z.object({
  name: z.string(),
  type: z.string(),
  query: z.union([z.string(), z.object({ query: z.string() })]).optional(),
  datasource: DatasourceRef.optional(),
  multi: z.boolean().optional(),
  includeAll: z.boolean().optional(),
  allValue: z.string().optional(),
  auto: z.boolean().optional(),
  auto_min: z.string().optional(),
});

const Dashboard = z.object({
  uid: z.string(),
  title: z.string(),
  schemaVersion: z.number().int(),
  panels: z.array(Panel),
  templating: z.object({ list: z.array(Variable) }),
});
export type Dashboard = z.infer<typeof Dashboard>;

export function loadDashboard(): Dashboard {
  return Dashboard.parse(JSON.parse(readFileSync(dashboardFile, "utf8")));
}

export interface PanelQuery {
  panel: Panel;
  refId: string;
  expr: string;
}

export function dashboardQueries(dashboard: Dashboard = loadDashboard()): PanelQuery[] {
  return dashboard.panels.flatMap((panel) =>
    (panel.targets ?? []).map((target) => ({ panel, refId: target.refId, expr: target.expr })),
  );
}

/**
 * A dashboard expression as Grafana would send it, with its variables replaced; a panel repeated
 * per Playbook gets one value of $playbook each (by default all of them at once, as "All" sends).
 */
export function substituteVariables(
  expr: string,
  values: { namespace: string; rateInterval: string; range: string; playbook?: string },
): string {
  return expr
    .replaceAll("$namespace", values.namespace)
    .replaceAll("$playbook", values.playbook ?? ".+")
    .replaceAll("$__rate_interval", values.rateInterval)
    .replaceAll("$interval", values.rateInterval)
    .replaceAll("$__range", values.range);
}

const AlertRule = z.object({
  alert: z.string(),
  expr: z.string(),
  for: z.string().optional(),
  labels: z.object({ severity: z.enum(["warning", "critical"]) }).catchall(z.string()),
  annotations: z.object({ summary: z.string(), description: z.string(), runbook_url: z.url() }),
});
export type AlertRule = z.infer<typeof AlertRule>;

const RulesFile = z.object({
  groups: z.array(z.object({ name: z.string(), rules: z.array(AlertRule) })),
});

export function loadAlertRules(): AlertRule[] {
  return RulesFile.parse(parseYaml(readFileSync(rulesFile, "utf8"))).groups.flatMap((group) => group.rules);
}

/** Names a query can select: each metric of the registry, and a histogram's series. */
export async function exportedMetricNames(): Promise<Set<string>> {
  // The CronPlaybook reconciler's series are on the same registry (ControllerMetrics.cron).
  const controller = new ControllerMetrics();
  const metrics = await controller.registry.getMetricsAsJSON();
  return new Set(
    metrics.flatMap((metric) =>
      String(metric.type) === "histogram"
        ? [`${metric.name}_bucket`, `${metric.name}_count`, `${metric.name}_sum`]
        : [metric.name],
    ),
  );
}

/** The controller's metric names an expression selects (those with the playbook_ prefix). */
export function playbookMetricsIn(expr: string): string[] {
  return [...new Set(expr.match(/\bplaybook_[a-z0-9_]+/g) ?? [])];
}
