// The chart's derived files (CRD copies, version, values schema, README table) never drift from
// their sources: crds/, package.json and values.yaml.
import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { CHART_DIR, readKeyDocs, staleFiles, valuesSchema } from "../../scripts/chart-generate.js";
import { repoRoot } from "../harness/binaries.js";

const chart = path.join(repoRoot(), CHART_DIR);

describe("the Helm chart's generated files", () => {
  it("are up to date with crds/, package.json and values.yaml (npm run chart:generate)", () => {
    expect(staleFiles()).toEqual([]);
  });

  it("carry the repository's CRD byte for byte", () => {
    const source = readFileSync(path.join(repoRoot(), "crds", "playbook.dev_playbooks.yaml"), "utf8");
    const copy = readFileSync(path.join(chart, "files", "crds", "playbook.dev_playbooks.yaml"), "utf8");
    expect(copy).toBe(source);
  });

  it("take the chart's version and appVersion from package.json", () => {
    const pkg = JSON.parse(readFileSync(path.join(repoRoot(), "package.json"), "utf8")) as {
      version: string;
    };
    const chartYaml = parse(readFileSync(path.join(chart, "Chart.yaml"), "utf8")) as Record<string, string>;
    expect(chartYaml.version).toBe(pkg.version);
    expect(chartYaml.appVersion).toBe(pkg.version);
  });

  it("describe every value and type it from its default and its @schema comment", () => {
    const text = [
      "# How many.",
      '# @schema {"minimum": 1}',
      "count: 2",
      "nested:",
      "  # A duration.",
      '  # @schema {"$ref": "#/$defs/duration"}',
      "  wait: 10s",
      '# @schema {"type": "object", "additionalProperties": true}',
      "# Free form.",
      "free:",
      "  a: 1",
    ].join("\n");
    const schema = valuesSchema(parse(text) as Record<string, unknown>, readKeyDocs(text));
    expect(schema).toMatchObject({
      additionalProperties: false,
      properties: {
        count: { type: "integer", minimum: 1, description: "How many." },
        nested: {
          type: "object",
          additionalProperties: false,
          properties: { wait: { type: "string", pattern: expect.stringContaining("ms|s|m|h") } },
        },
        free: { type: "object", additionalProperties: true, description: "Free form." },
      },
    });
  });
});
