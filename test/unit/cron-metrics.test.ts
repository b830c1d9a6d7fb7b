// The CronPlaybook metrics as Prometheus scrapes them from the controller's /metrics.
import { describe, expect, it } from "vitest";
import { ControllerMetrics } from "../../src/controller/metrics.js";
import { labelNamesOf, sample } from "./metrics-text.js";

function setup() {
  const controller = new ControllerMetrics({ defaults: false });
  return { cron: controller.cron, text: () => controller.registry.metrics() };
}

describe("CronMetrics", () => {
  it("counts runs started by trigger, skipped, replaced and missed, by namespace", async () => {
    const { cron, text } = setup();
    cron.runStarted("ops", "schedule");
    cron.runStarted("ops", "schedule");
    cron.runStarted("ops", "manual");
    cron.runStarted("billing", "schedule");
    cron.runSkipped("ops");
    cron.runReplaced("billing");
    cron.runsMissed("ops", 3);
    cron.runsMissed("ops", 0);
    const out = await text();
    expect(sample(out, "playbook_cron_runs_started_total", { namespace: "ops", trigger: "schedule" })).toBe(
      2,
    );
    expect(sample(out, "playbook_cron_runs_started_total", { namespace: "ops", trigger: "manual" })).toBe(1);
    expect(
      sample(out, "playbook_cron_runs_started_total", { namespace: "billing", trigger: "schedule" }),
    ).toBe(1);
    expect(sample(out, "playbook_cron_runs_skipped_total", { namespace: "ops" })).toBe(1);
    expect(sample(out, "playbook_cron_runs_replaced_total", { namespace: "billing" })).toBe(1);
    expect(sample(out, "playbook_cron_runs_missed_total", { namespace: "ops" })).toBe(3);
  });

  it("creates a namespace's counters at 0 when it is first seen, so a first skip or miss counts in increase()", async () => {
    const { cron, text } = setup();
    cron.seed("ops");
    const seen = await text();
    expect(sample(seen, "playbook_cron_runs_missed_total", { namespace: "ops" })).toBe(0);
    expect(sample(seen, "playbook_cron_runs_skipped_total", { namespace: "ops" })).toBe(0);
    expect(sample(seen, "playbook_cron_runs_replaced_total", { namespace: "ops" })).toBe(0);
    expect(sample(seen, "playbook_cron_runs_started_total", { namespace: "ops", trigger: "manual" })).toBe(0);
    cron.runStarted("billing", "schedule");
    const started = await text();
    expect(sample(started, "playbook_cron_runs_missed_total", { namespace: "billing" })).toBe(0);
    expect(
      sample(started, "playbook_cron_runs_started_total", { namespace: "billing", trigger: "manual" }),
    ).toBe(0);
  });

  it("puts the delay from scheduled time to run created in a histogram, a negative (clock skew) as 0", async () => {
    const { cron, text } = setup();
    cron.scheduleDelay("ops", 0.3);
    cron.scheduleDelay("ops", 1.5);
    cron.scheduleDelay("ops", -0.2);
    const out = await text();
    const bucket = (le: string) =>
      sample(out, "playbook_cron_schedule_delay_seconds_bucket", { le, namespace: "ops" });
    expect(bucket("0.1")).toBe(1);
    expect(bucket("0.5")).toBe(2);
    expect(bucket("1")).toBe(2);
    expect(bucket("2")).toBe(3);
    expect(bucket("+Inf")).toBe(3);
    expect(sample(out, "playbook_cron_schedule_delay_seconds_count", { namespace: "ops" })).toBe(3);
    expect(sample(out, "playbook_cron_schedule_delay_seconds_sum", { namespace: "ops" })).toBeCloseTo(1.8);
  });

  it("sets the number of stale CronPlaybooks per namespace", async () => {
    const { cron, text } = setup();
    cron.setStale("ops", 2);
    cron.setStale("ops", 1);
    cron.setStale("billing", 0);
    const out = await text();
    expect(sample(out, "playbook_cron_stale", { namespace: "ops" })).toBe(1);
    expect(sample(out, "playbook_cron_stale", { namespace: "billing" })).toBe(0);
  });

  it("labels every series by namespace only (and trigger on runs started)", async () => {
    const { cron, text } = setup();
    cron.runStarted("ops", "schedule");
    cron.scheduleDelay("ops", 1);
    cron.setStale("ops", 0);
    const out = await text();
    expect(labelNamesOf(out, "playbook_cron_runs_started_total")).toEqual(new Set(["namespace", "trigger"]));
    expect(labelNamesOf(out, "playbook_cron_schedule_delay_seconds")).toEqual(new Set(["namespace", "le"]));
    for (const name of [
      "playbook_cron_runs_skipped_total",
      "playbook_cron_runs_replaced_total",
      "playbook_cron_runs_missed_total",
      "playbook_cron_stale",
    ])
      expect(labelNamesOf(out, name), name).toEqual(new Set(["namespace"]));
  });
});
