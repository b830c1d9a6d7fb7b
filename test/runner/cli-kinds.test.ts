// What the docs promise of `playbook validate` and `playbook run`, with the built CLI in a real
// process: each of the project's kinds validated by its own schema, a manifest with only
// metadata.generateName taken as `submit` takes it, and a --report path that cannot be written
// refused before anything runs.
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { CRON_KIND as API_CRON_KIND } from "../../src/api/cron-playbook.js";
import { CRON_KIND } from "../../src/cli/validate-kinds.js";
import { startCli as cli } from "../support/cli.js";

function file(object: object, name = "manifest.yaml"): string {
  const path = join(mkdtempSync(join(tmpdir(), "cli-kinds-")), name);
  writeFileSync(path, stringify(object));
  return path;
}

const API_VERSION = "playbook.dev/v1alpha1";

describe("playbook validate of each kind", () => {
  it("checks a PlaybookPolicy with its own schema and shows its defaults and maximums", async () => {
    const result = await cli(["validate", "-f", join(import.meta.dirname, "../../examples/policy.yaml")]);
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("PlaybookPolicy default is valid");
    expect(result.stdout).toContain(
      "  maximums: ceiling 2h, killGrace 1m, taskTimeout 1h, runningPlaybooks 5\n",
    );
  });

  it("refuses a bad PlaybookPolicy naming its own fields, not every field as unknown", async () => {
    const result = await cli([
      "validate",
      "-f",
      file({
        apiVersion: API_VERSION,
        kind: "PlaybookPolicy",
        metadata: { name: "default" },
        spec: { defaults: { killGrace: "10m" }, maximums: { ceiling: "2 hours", killGrace: "1m" } },
      }),
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/manifest\.yaml: invalid PlaybookPolicy\n/);
    expect(result.stderr).toContain("spec.maximums.ceiling:");
    expect(result.stderr).not.toContain("unknown field");
    expect(result.stderr).not.toContain("must be Playbook");
  });

  it("says which policy default passes a maximum", async () => {
    const result = await cli([
      "validate",
      "-f",
      file({
        apiVersion: API_VERSION,
        kind: "PlaybookPolicy",
        metadata: { name: "default" },
        spec: { defaults: { killGrace: "10m" }, maximums: { killGrace: "1m" } },
      }),
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(
      "  spec.defaults.killGrace: 10m is longer than spec.maximums.killGrace 1m\n",
    );
  });

  const cron = (template: object, schedule = "0 3 * * *") => ({
    apiVersion: API_VERSION,
    kind: "CronPlaybook",
    metadata: { name: "nightly" },
    spec: { schedule, timeZone: "Europe/Berlin", concurrencyPolicy: "Forbid", template: { spec: template } },
  });

  it("checks a CronPlaybook's schedule and its template as the run it makes", async () => {
    const result = await cli([
      "validate",
      "-f",
      file(cron({ ceiling: "30m", tasks: [{ name: "backup", run: "true", timeout: "10m" }] })),
    ]);
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("CronPlaybook nightly is valid\n");
    expect(result.stdout).toMatch(
      /schedule "0 3 \* \* \*" \(Europe\/Berlin\), concurrencyPolicy Forbid, next run 20/,
    );
    expect(result.stdout).toContain("task backup: timeout 10m (task)");
  });

  it.each([
    {
      name: "a template task timeout over its ceiling",
      manifest: cron({ ceiling: "30m", tasks: [{ name: "backup", run: "true", timeout: "2h" }] }),
      says: "  spec.template.spec.tasks[0].timeout: 2h is longer than spec.ceiling 30m\n",
    },
    {
      name: "a template killGrace over the maximum",
      manifest: cron({ killGrace: "1000h", tasks: [{ name: "backup", run: "true" }] }),
      says: "  spec.template.spec.killGrace: 1000h is longer than the maximum killGrace 5m (playbook run's own maximum)\n",
    },
    {
      name: "a schedule that is not one",
      manifest: cron({ tasks: [{ name: "backup", run: "true" }] }, "61 3 * * *"),
      says: '  spec.schedule: "61 3 * * *" is not a schedule',
    },
  ])("refuses $name, naming the field and the value", async ({ manifest, says }) => {
    const result = await cli(["validate", "-f", file(manifest)]);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/manifest\.yaml: invalid CronPlaybook\n/);
    expect(result.stderr).toContain(says);
  });

  it("says once that a kind it does not know is not one it checks", async () => {
    const result = await cli([
      "validate",
      "-f",
      file({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "x" }, data: { a: "1" } }),
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr.trim().split("\n")).toEqual([
      expect.stringMatching(/manifest\.yaml: invalid manifest$/),
      '  kind: "ConfigMap" is not a kind validate knows: Playbook, PlaybookPolicy, CronPlaybook',
    ]);
  });

  it("names CronPlaybook as the API does", () => {
    expect(CRON_KIND).toBe(API_CRON_KIND);
  });
});

describe("playbook run of another kind", () => {
  it("says once that it runs Playbooks, with exit 2", async () => {
    const result = await cli(["run", "-f", join(import.meta.dirname, "../../examples/policy.yaml")]);
    expect(result.code).toBe(2);
    expect(result.stderr.trim().split("\n")).toEqual([
      expect.stringMatching(/policy\.yaml: invalid Playbook$/),
      '  kind: "PlaybookPolicy" must be Playbook',
    ]);
  });
});

describe("a manifest with only metadata.generateName", () => {
  const generated = (marker: string) =>
    file({
      apiVersion: API_VERSION,
      kind: "Playbook",
      metadata: { generateName: "nightly-" },
      spec: { tasks: [{ name: "a", run: `touch ${marker}` }] },
    });

  it("is valid, and validate says its name is generated", async () => {
    const result = await cli(["validate", "-f", generated("/dev/null")]);
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("Playbook nightly-<generated> is valid");
  });

  it("runs under the prefix and a generated suffix, as the API server would name it", async () => {
    const marker = join(mkdtempSync(join(tmpdir(), "cli-kinds-")), "ran");
    const result = await cli(["run", "-f", generated(marker), "-o", "json"]);
    expect(result.code).toBe(0);
    expect(existsSync(marker)).toBe(true);
    const printed = JSON.parse(result.stdout) as { metadata: { name: string; generateName: string } };
    expect(printed.metadata.generateName).toBe("nightly-");
    expect(printed.metadata.name).toMatch(/^nightly-[a-z0-9]{5}$/);
    expect(result.stderr).toContain(`playbook: running ${printed.metadata.name}: 1 task`);
  });

  it("with an invalid prefix is refused naming metadata.generateName", async () => {
    const result = await cli([
      "run",
      "-f",
      file({
        apiVersion: API_VERSION,
        kind: "Playbook",
        metadata: { generateName: "Nightly_" },
        spec: { tasks: [{ name: "a", run: "true" }] },
      }),
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('metadata.generateName: "Nightly_" is not a valid name prefix');
  });
});

describe("run --report to a path that cannot be written", () => {
  const manifest = (marker: string) =>
    file({
      apiVersion: API_VERSION,
      kind: "Playbook",
      metadata: { name: "reported" },
      spec: { tasks: [{ name: "a", run: `touch ${marker}` }] },
    });

  it.each([
    {
      name: "a folder that does not exist",
      path: () => "/nonexistent/playbook/report.txt",
      says: "its folder does not exist",
    },
    { name: "a directory", path: () => mkdtempSync(join(tmpdir(), "cli-kinds-")), says: "is a directory" },
    {
      name: "a path under a file",
      path: () => join(file({}, "plain"), "report.txt"),
      says: "a folder on the path is a file",
    },
  ])("is refused before the run with exit 2 for $name, naming the path and why", async ({ path, says }) => {
    const marker = join(mkdtempSync(join(tmpdir(), "cli-kinds-")), "ran");
    const report = path();
    const result = await cli(["run", "-f", manifest(marker), "--report", report]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(`playbook: --report ${report}: ${says}`);
    expect(result.stderr).toContain("nothing was run");
    expect(existsSync(marker)).toBe(false);
  });

  it("still writes a report to a path that can be written", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cli-kinds-"));
    const report = join(dir, "report.txt");
    const result = await cli(["run", "-f", manifest(join(dir, "ran")), "--report", report]);
    expect(result.code).toBe(0);
    expect(readFileSync(report, "utf8")).toContain('"Succeeded"');
  });
});
