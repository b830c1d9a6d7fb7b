// The alert rules, as plain Prometheus rules the chart embeds in a PrometheusRule: valid for
// promtool, proven by promtool's unit tests (each alert fires on a recorded series and stays quiet
// on a healthy one), and each linked to its runbook section.
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import {
  exportedMetricNames,
  loadAlertRules,
  playbookMetricsIn,
  rulesFile,
  rulesTestFile,
  runbookFile,
} from "../support/monitoring.js";

const run = promisify(execFile);
const rules = loadAlertRules();
const RUNBOOK_URL =
  "https://github.com/playbook-controller/playbook-controller/blob/main/charts/playbook-controller/RUNBOOK.md";

async function promtool(args: string[]) {
  try {
    const { stdout, stderr } = await run("promtool", args, { cwd: path.dirname(rulesFile) });
    return { code: 0, output: stdout + stderr };
  } catch (error) {
    const failed = error as { code?: number; stdout?: string; stderr?: string };
    return { code: failed.code ?? 1, output: `${failed.stdout ?? ""}${failed.stderr ?? ""}` };
  }
}

describe("the alert rules", () => {
  it("pass promtool check rules", async () => {
    const { code, output } = await promtool(["check", "rules", path.basename(rulesFile)]);
    expect(output).toContain(`SUCCESS: ${rules.length} rules found`);
    expect(code, output).toBe(0);
  });

  it("fire on recorded series and stay quiet on healthy ones (promtool test rules)", async () => {
    const { code, output } = await promtool(["test", "rules", path.basename(rulesTestFile)]);
    expect(code, output).toBe(0);
    expect(output).toContain("SUCCESS");
  });

  it("have a promtool test for every alert", () => {
    const tests = readFileSync(rulesTestFile, "utf8");
    for (const rule of rules) expect(tests, rule.alert).toContain(`alertname: ${rule.alert}`);
  });

  it("are the few the runbook expects, each with a severity, a summary and a description", () => {
    expect(rules.map((rule) => rule.alert)).toEqual([
      "PlaybookLimitsFiringFasterThanUsual",
      "PlaybookRunCeilingHit",
      "PlaybookPodDeadlineExceeded",
      "PlaybookRunsLost",
      "PlaybookQueuedNearQueueTimeout",
      "PlaybookReportsUntrusted",
      "PlaybookCronMissedRuns",
      "PlaybookCronStale",
      "PlaybookLogArchiveFailing",
      "PlaybookControllerAbsent",
      "PlaybookControllerNotReady",
      "PlaybookControllerNoLeader",
      "PlaybookControllerNotReconciling",
    ]);
    const critical = rules.filter((rule) => rule.labels.severity === "critical").map((rule) => rule.alert);
    expect(critical).toEqual([
      "PlaybookControllerAbsent",
      "PlaybookControllerNoLeader",
      "PlaybookControllerNotReconciling",
    ]);
  });

  it("name the namespace, and the Playbook where the label is there, in each run alert's description", () => {
    for (const rule of rules.filter((r) => r.expr.includes("namespace"))) {
      expect(rule.annotations.description, rule.alert).toContain("{{ $labels.namespace }}");
      if (rule.expr.includes("by (namespace, playbook"))
        expect(rule.annotations.description, rule.alert).toContain("{{ with $labels.playbook }}");
    }
  });

  it("link each alert to its own section of RUNBOOK.md", () => {
    const headings = readFileSync(runbookFile, "utf8")
      .split("\n")
      .filter((line) => line.startsWith("## "))
      .map((line) => line.slice(3).trim());
    for (const rule of rules) {
      expect(rule.annotations.runbook_url).toBe(`${RUNBOOK_URL}#${rule.alert.toLowerCase()}`);
      expect(headings).toContain(rule.alert);
    }
  });

  it("hold Prometheus templating only, so the chart embeds the file as it is", () => {
    const text = readFileSync(rulesFile, "utf8");
    const actions = [...text.matchAll(/\{\{(.*?)\}\}/g)].map((match) => match[1]?.trim() ?? "");
    const prometheusOnly =
      /^(\$labels\.\w+|\$value( \| humanize)?|with \$labels\.\w+|\.|end|printf "%\.0f" \$value)$/;
    expect(actions.filter((action) => !prometheusOnly.test(action))).toEqual([]);
    expect(text).not.toMatch(/\.Values|\.Release|\{\{-|-\}\}/);
  });

  it("select only metrics the controller exports", async () => {
    const exported = await exportedMetricNames();
    for (const rule of rules)
      expect(
        playbookMetricsIn(rule.expr).filter((name) => !exported.has(name)),
        rule.alert,
      ).toEqual([]);
  });
});
