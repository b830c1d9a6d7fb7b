import { describe, expect, it } from "vitest";
import { parseAuditLines, summarizeWrites } from "../bench/audit.js";
import {
  type BenchResults,
  BenchResultsSchema,
  formatResults,
  REQUIRED_COMPARISONS,
  REQUIRED_FIGURES,
} from "../bench/results.js";

function results(overrides: Partial<BenchResults> = {}): BenchResults {
  return {
    version: 1,
    quick: true,
    startedAt: "2026-11-30T15:00:00.000Z",
    finishedAt: "2026-11-30T15:04:00.000Z",
    machine: { cores: 2, loadAverage: [1.5, 1.2, 1] },
    comparisons: REQUIRED_COMPARISONS.map((name) => ({
      name,
      ours: 2,
      reference: 4,
      unit: "ms",
      ratio: 0.5,
      target: "<= 1.0",
    })),
    figures: REQUIRED_FIGURES.map((name) => ({ name, value: 1, unit: "MB" })),
    ...overrides,
  };
}

describe("benchmark results JSON", () => {
  it("accepts every name the issue fixes, controller_rss_mb_10000 in both lists", () => {
    const parsed = BenchResultsSchema.parse(JSON.parse(JSON.stringify(results())));
    expect(parsed.comparisons.map((c) => c.name)).toEqual([...REQUIRED_COMPARISONS]);
    expect(parsed.figures.map((f) => f.name)).toContain("controller_rss_mb_10000");
  });

  it("refuses a name twice in one list", () => {
    const twice = results();
    twice.figures.push({ name: "events_per_run", value: 2, unit: "events/run" });
    expect(() => BenchResultsSchema.parse(twice)).toThrow(/events_per_run appears twice/);
  });

  it("takes a missing value only with a note that says why", () => {
    const missing = results();
    missing.comparisons[0] = {
      ...missing.comparisons[0],
      ours: null,
      ratio: null,
    } as BenchResults["comparisons"][0];
    expect(() => BenchResultsSchema.parse(missing)).toThrow(/no value and no note/);
    missing.comparisons[0] = {
      ...missing.comparisons[0],
      note: "not measurable here",
    } as BenchResults["comparisons"][0];
    expect(BenchResultsSchema.parse(missing).comparisons[0]?.ours).toBeNull();
  });

  it.each(["1.0", "< 1", "<= one", ">=1.0"])("refuses the target %j", (target) => {
    const bad = results();
    bad.comparisons[0] = { ...bad.comparisons[0], target } as BenchResults["comparisons"][0];
    expect(() => BenchResultsSchema.parse(bad)).toThrow();
  });

  it("refuses a number that JSON cannot carry", () => {
    const bad = results();
    bad.comparisons[0] = {
      ...bad.comparisons[0],
      ours: Number.POSITIVE_INFINITY,
    } as BenchResults["comparisons"][0];
    expect(() => BenchResultsSchema.parse(bad)).toThrow();
  });

  it("prints a table that says which targets were met, then the figures and the notes", () => {
    const printed = results({
      comparisons: [
        {
          name: "cli_startup",
          ours: 410,
          reference: 93.6,
          unit: "ms",
          ratio: 4.38,
          target: "<= 2.0",
          note: "playbook --version",
        },
        {
          name: "stdout_throughput",
          ours: 900,
          reference: 1000,
          unit: "MiB/s",
          ratio: 0.9,
          target: ">= 0.7",
        },
      ],
      figures: [{ name: "cluster_up_seconds", value: 12.5, unit: "s" }],
    });
    const lines = formatResults(printed).split("\n");
    expect(lines[0]).toMatch(/^name\s+ours\s+reference\s+unit\s+ratio\s+target\s+met$/);
    expect(lines[1]).toMatch(/^cli_startup\s+410\s+93\.6\s+ms\s+4\.38\s+<= 2\.0\s+NO$/);
    expect(lines[2]).toMatch(/^stdout_throughput\s+900\s+1000\s+MiB\/s\s+0\.90\s+>= 0\.7\s+yes$/);
    expect(lines).toContain("cluster_up_seconds  12.5   s");
    expect(lines).toContain("  cli_startup: playbook --version");
  });
});

describe("audit log counts", () => {
  const line = (user: string, verb: string, resource: string, code: number, subresource?: string) =>
    JSON.stringify({
      kind: "Event",
      level: "Metadata",
      stage: "ResponseComplete",
      verb,
      user: { username: user },
      objectRef: { resource, namespace: "ns", ...(subresource ? { subresource } : {}) },
      responseStatus: { code },
    });

  it("counts a user's object writes, conflicts and events apart, and skips other stages and torn lines", () => {
    const text = [
      line("ours", "create", "pods", 201),
      line("ours", "patch", "playbooks", 200, "status"),
      line("ours", "update", "playbooks", 409, "status"),
      line("ours", "create", "events", 201),
      line("ours", "watch", "pods", 200),
      line("theirs", "create", "pods", 201),
      JSON.stringify({
        stage: "RequestReceived",
        verb: "create",
        user: { username: "ours" },
        objectRef: { resource: "pods" },
      }),
      '{"stage":"ResponseComplete","verb":"cre',
    ].join("\n");
    const summary = summarizeWrites(parseAuditLines(text), "ours");
    expect(summary).toEqual({
      objectWrites: 3,
      conflicts: 1,
      events: 1,
      byKind: { create: 1, status: 2, event: 1 },
      byVerbAndResource: {
        "create pods": 1,
        "patch playbooks/status": 1,
        "update playbooks/status 409": 1,
        "create events": 1,
      },
    });
  });
});
