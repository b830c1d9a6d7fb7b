import { describe, expect, it } from "vitest";
import { LOCAL_DEFAULTS, resolveLimits } from "../../src/api/limits.js";
import { InvalidPlaybookError, parsePlaybookManifest } from "../../src/api/manifest.js";

const header = "apiVersion: playbook.dev/v1alpha1\nkind: Playbook\nmetadata:\n  name: demo\n";

function problemsOf(yaml: string): string[] {
  try {
    parsePlaybookManifest(yaml, LOCAL_DEFAULTS, "demo.yaml");
  } catch (error) {
    if (error instanceof InvalidPlaybookError) return error.problems.map((p) => `${p.path}: ${p.message}`);
    throw error;
  }
  return [];
}

describe("reading a Playbook manifest", () => {
  it.each([
    [
      "a task timeout longer than the ceiling",
      "spec:\n  ceiling: 30m\n  tasks:\n    - {name: a, run: 'true'}\n    - {name: b, run: 'true', timeout: 2h}\n",
      "spec.tasks[1].timeout: 2h is longer than spec.ceiling 30m",
    ],
    [
      "a task timeout longer than the default ceiling",
      "spec:\n  tasks:\n    - {name: a, run: 'true', timeout: 2h}\n",
      "spec.tasks[0].timeout: 2h is longer than the default ceiling 1h",
    ],
    [
      "an unknown field",
      "spec:\n  tasks:\n    - {name: a, run: 'true', timout: 5m}\n",
      "spec.tasks[0].timout: unknown field",
    ],
    [
      "a malformed duration",
      "spec:\n  stall: 1x\n  tasks:\n    - {name: a, run: 'true'}\n",
      'spec.stall: "1x" is not a duration',
    ],
    [
      "a negative duration",
      "spec:\n  killGrace: -1s\n  tasks:\n    - {name: a, run: 'true'}\n",
      'spec.killGrace: "-1s" must not be negative',
    ],
    [
      "duplicate task names",
      "spec:\n  tasks:\n    - {name: a, run: 'true'}\n    - {name: a, run: 'false'}\n",
      'spec.tasks[1].name: "a" is already used by spec.tasks[0]',
    ],
    [
      "a task name that is not a DNS label",
      "spec:\n  tasks:\n    - {name: Build_1, run: 'true'}\n",
      'spec.tasks[0].name: "Build_1"',
    ],
    ["no tasks", "spec:\n  tasks: []\n", "spec.tasks: must list at least one task"],
    ["a missing run", "spec:\n  tasks:\n    - {name: a}\n", "spec.tasks[0].run: is required"],
    [
      "a ceiling above the maximum",
      "spec:\n  ceiling: 48h\n  tasks:\n    - {name: a, run: 'true'}\n",
      "spec.ceiling: 48h is longer than the maximum ceiling 24h",
    ],
    [
      "a killGrace above the maximum, which would leave the ceiling unbounded",
      "spec:\n  ceiling: 3s\n  killGrace: 1000h\n  tasks:\n    - {name: a, run: 'true'}\n",
      "spec.killGrace: 1000h is longer than the maximum killGrace 5m (playbook run's own maximum)",
    ],
    [
      "a reserved environment variable",
      "spec:\n  tasks:\n    - {name: a, run: 'true', env: [{name: PLAYBOOK_CANCEL_FILE, value: x}]}\n",
      "spec.tasks[0].env[0].name",
    ],
    [
      "retries that are not a number",
      "spec:\n  tasks:\n    - {name: a, run: 'true', retries: many}\n",
      "spec.tasks[0].retries",
    ],
    [
      "a NUL byte in a command, which no process can be started with",
      'spec:\n  tasks:\n    - {name: a, run: "echo a\\0b"}\n',
      'spec.tasks[0].run: "echo a\\u0000b" must not contain a NUL byte',
    ],
    [
      "a NUL byte in an environment value",
      'spec:\n  tasks:\n    - {name: a, run: "true", env: [{name: K, value: "x\\0y"}]}\n',
      'spec.tasks[0].env[0].value: "x\\u0000y" must not contain a NUL byte',
    ],
    [
      "a NUL byte in a working directory",
      'spec:\n  tasks:\n    - {name: a, run: "true", workingDir: "/tmp\\0x"}\n',
      'spec.tasks[0].workingDir: "/tmp\\u0000x" must not contain a NUL byte',
    ],
    [
      "a task timeout of 0s, which would end the task at once",
      "spec:\n  tasks:\n    - {name: a, run: 'true', timeout: 0s}\n",
      "spec.tasks[0].timeout: 0s would end the task at once: a timeout must be longer than 0s; leave it out for no timeout of its own",
    ],
    [
      "a ceiling of 0s",
      "spec:\n  ceiling: 0s\n  tasks:\n    - {name: a, run: 'true'}\n",
      "spec.ceiling: 0s would end the run at once: the ceiling must be longer than 0s",
    ],
    [
      "a word where a number goes, in the words of the other messages",
      "spec:\n  backoffLimit: two\n  tasks:\n    - {name: a, run: 'true'}\n",
      'spec.backoffLimit: "two" must be a number',
    ],
    [
      "a negative number of retries, in the words of the other messages",
      "spec:\n  tasks:\n    - {name: a, run: 'true', retries: -1}\n",
      "spec.tasks[0].retries: -1 must be at least 0",
    ],
    [
      "a fraction where a whole number goes",
      "spec:\n  tasks:\n    - {name: a, run: 'true', retries: 1.5}\n",
      "spec.tasks[0].retries: 1.5 must be a whole number",
    ],
  ])("refuses %s, naming the field and value", (_name, spec, expected) => {
    const problems = problemsOf(header + spec);
    expect(problems.join("\n")).toContain(expected);
    // zod's own words are not shown: each message reads like the others.
    expect(problems.join("\n")).not.toMatch(
      /Invalid input|Too small|Too big|Invalid option|expected \w+, received/,
    );
  });

  it.each([
    ["a trailing document separator", `${header}spec:\n  tasks: [{name: a, run: 'true'}]\n---\n`],
    ["a leading empty document", `---\n---\n${header}spec:\n  tasks: [{name: a, run: 'true'}]\n`],
    ["a comment-only document", `# generated\n---\n${header}spec:\n  tasks: [{name: a, run: 'true'}]\n`],
    ["a document end marker", `${header}spec:\n  tasks: [{name: a, run: 'true'}]\n...\n`],
  ])("reads a manifest with %s, as kubectl does", (_name, yaml) => {
    expect(problemsOf(yaml)).toEqual([]);
  });

  it("reads anchors and merge keys, as kubectl does", () => {
    const playbook = parsePlaybookManifest(
      `${header}spec:\n  tasks:\n    - &base {name: a, run: 'true', timeout: 10m}\n    - <<: *base\n      name: b\n`,
      LOCAL_DEFAULTS,
    );
    expect(playbook.spec.tasks[1]).toMatchObject({ name: "b", run: "true", timeout: "10m" });
  });

  it("says a duration needs a unit when given a bare number", () => {
    expect(problemsOf(`${header}spec:\n  tasks:\n    - {name: a, run: 'true', timeout: 10}\n`)).toEqual([
      'spec.tasks[0].timeout: 10 must be a duration string with a unit, such as "10s" or "10m"',
    ]);
  });

  it("refuses a command or environment entry too long for exec, before anything runs", () => {
    // Within the CRD's 65536 characters, yet over exec's bytes (the CRD counts them too).
    const run = "€".repeat(50_000);
    // An env value is bounded in characters: 32000 of them fit one exec string whatever they are.
    const value = "x".repeat(32_001);
    const problems = problemsOf(
      `${header}spec:\n  tasks:\n    - {name: a, run: 'true'}\n    - {name: b, run: '${run}', env: [{name: K, value: '${value}'}]}\n`,
    );
    expect(problems).toEqual([
      "spec.tasks[1].run: is 150000 bytes; one exec argument holds at most 131071",
      "spec.tasks[1].env[0].value: must be at most 32000 characters",
    ]);
  });

  it("refuses YAML that does not parse, naming the line", () => {
    expect(problemsOf(`${header}spec:\n  tasks: [\n`).join("\n")).toMatch(/line \d+, column \d+: YAML/);
  });

  it("refuses a file with the wrong kind", () => {
    expect(
      problemsOf(
        `${header.replace("kind: Playbook", "kind: Job")}spec:\n  tasks:\n    - {name: a, run: 'true'}\n`,
      ),
    ).toEqual(['kind: "Job" must be Playbook']);
  });

  it("resolves each effective limit with the level it came from", () => {
    const playbook = parsePlaybookManifest(
      `${header}spec:\n  ceiling: 30m\n  tasks:\n    - {name: a, run: 'true', timeout: 10m, stall: 2m}\n    - {name: b, run: 'true'}\n`,
      LOCAL_DEFAULTS,
    );
    const limits = resolveLimits(playbook.spec, LOCAL_DEFAULTS);
    expect(limits.ceiling).toMatchObject({ ms: 1_800_000, source: "spec" });
    expect(limits.stall).toMatchObject({ ms: 600_000, source: "default" });
    expect(limits.killGrace).toMatchObject({ ms: 10_000, source: "default" });
    expect(limits.tasks[0]).toMatchObject({
      timeout: { ms: 600_000, source: "task" },
      stall: { ms: 120_000, source: "task" },
    });
    expect(limits.tasks[1]).toMatchObject({ timeout: null, stall: { source: "default" } });
  });
});
