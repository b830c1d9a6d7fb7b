// The CronPlaybook CRD: its template's spec is the Playbook's spec schema (one copy kept equal),
// its names and printer columns are those of the contract, and its defaults are the API module's.
import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import {
  CRON_KIND,
  CRON_PLURAL,
  CRON_SHORT_NAME,
  CronPlaybookSchema,
  DEFAULT_FAILED_HISTORY,
  DEFAULT_SUCCESSFUL_HISTORY,
} from "../../src/api/cron-playbook.js";
import { repoRoot } from "../harness/binaries.js";

interface Crd {
  spec: {
    names: { kind: string; plural: string; shortNames: string[] };
    versions: {
      additionalPrinterColumns: { name: string; jsonPath: string }[];
      schema: { openAPIV3Schema: { properties: { spec: Schema } } };
    }[];
  };
}
interface Schema {
  properties: Record<string, Schema & { default?: unknown; pattern?: string }>;
}

const read = (file: string) => parse(readFileSync(path.join(repoRoot(), "crds", file), "utf8")) as Crd;

describe("the CronPlaybook CRD", () => {
  const cron = read("playbook.dev_cronplaybooks.yaml");
  const version = cron.spec.versions[0];
  const spec = version?.schema.openAPIV3Schema.properties.spec;

  it("holds the Playbook's spec schema as its template's spec", () => {
    const playbook = read("playbook.dev_playbooks.yaml").spec.versions[0]?.schema.openAPIV3Schema.properties
      .spec;
    expect(spec?.properties.template?.properties.spec).toEqual(playbook);
  });

  it("is named as the contract says, with its printer columns", () => {
    expect(cron.spec.names).toMatchObject({
      kind: CRON_KIND,
      plural: CRON_PLURAL,
      shortNames: [CRON_SHORT_NAME],
    });
    expect(version?.additionalPrinterColumns.map((c) => c.name)).toEqual([
      "Schedule",
      "Time Zone",
      "Suspended",
      "Active",
      "Last Schedule",
      "Last Success",
      "Ready",
      "Missed",
      "Age",
    ]);
  });

  it("defaults as the API module does", () => {
    expect(spec?.properties.successfulRunsHistoryLimit?.default).toBe(DEFAULT_SUCCESSFUL_HISTORY);
    expect(spec?.properties.failedRunsHistoryLimit?.default).toBe(DEFAULT_FAILED_HISTORY);
    expect(spec?.properties.timeZone?.default).toBe("UTC");
    expect(spec?.properties.concurrencyPolicy?.default).toBe("Allow");
  });

  it("reads examples/nightly-backup.yaml as a valid CronPlaybook", () => {
    const example = parse(readFileSync(path.join(repoRoot(), "examples", "nightly-backup.yaml"), "utf8"));
    const parsed = CronPlaybookSchema.safeParse(example);
    expect(parsed.error?.issues).toBeUndefined();
    expect(parsed.data?.spec).toMatchObject({ schedule: "0 3 * * *", timeZone: "Europe/Berlin" });
  });

  it.each([
    ["0 3 * * *", true],
    ["*/15 * * * 1-5", true],
    ["@daily", true],
    ["@reboot", false],
    ["0 3 * *", false],
    ["", false],
  ])("takes the shape of schedule %j: %s", (schedule, ok) => {
    const pattern = new RegExp(spec?.properties.schedule?.pattern ?? "");
    expect(pattern.test(schedule)).toBe(ok);
  });
});
