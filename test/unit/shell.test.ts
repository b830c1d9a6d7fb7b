// spec.shell and spec.tasks[].shell as the schema reads them: every refusal names the field, the
// value and why; the task's shell wins over the spec's; the CRD's pattern refuses what zod does.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { LOCAL_DEFAULTS } from "../../src/api/limits.js";
import { InvalidPlaybookError, validatePlaybook } from "../../src/api/manifest.js";
import {
  describeShell,
  effectiveShell,
  SHELL_PATTERN,
  ShellCommand,
  shellWords,
} from "../../src/api/shell.js";

function problemsOf(spec: object): string[] {
  try {
    validatePlaybook(
      { apiVersion: "playbook.dev/v1alpha1", kind: "Playbook", metadata: { name: "p" }, spec },
      LOCAL_DEFAULTS,
      "pb.yaml",
    );
    return [];
  } catch (error) {
    if (!(error instanceof InvalidPlaybookError)) throw error;
    return error.problems.map((problem) => `${problem.path}: ${problem.message}`);
  }
}

describe("a task's shell", () => {
  it.each([
    ["bash -eo pipefail", ["bash", "-eo", "pipefail"]],
    ["  sh   -eu ", ["sh", "-eu"]],
    ["/usr/bin/env bash -e", ["/usr/bin/env", "bash", "-e"]],
    ["python3", ["python3"]],
    ["pwsh-7.4 -NoProfile", ["pwsh-7.4", "-NoProfile"]],
  ])("takes %j as the words %j", (value, words) => {
    expect(problemsOf({ shell: value, tasks: [{ name: "a", run: "true", shell: value }] })).toEqual([]);
    expect(shellWords(value)).toEqual(words);
  });

  it.each([
    ["", 'spec.tasks[1].shell: "" must name a shell, such as "bash -eo pipefail" or "sh -eu"'],
    ["   ", 'spec.tasks[1].shell: "   " must name a shell, such as "bash -eo pipefail" or "sh -eu"'],
    [
      "bash\t-e",
      'spec.tasks[1].shell: "bash\\t-e" must not contain control characters (tabs, newlines): words are separated by spaces',
    ],
    [
      "bash -e\n",
      'spec.tasks[1].shell: "bash -e\\n" must not contain control characters (tabs, newlines): words are separated by spaces',
    ],
    [
      "a b c d e f g h i",
      'spec.tasks[1].shell: "a b c d e f g h i" has 9 words, at most 8: a shell and its options, run as WORDS -c RUN',
    ],
    [
      "./bash -e",
      'spec.tasks[1].shell: "./bash -e" must start with an absolute path (/bin/bash) or a command name found on PATH (bash), not "./bash"',
    ],
    [
      "bin/bash",
      'spec.tasks[1].shell: "bin/bash" must start with an absolute path (/bin/bash) or a command name found on PATH (bash), not "bin/bash"',
    ],
    [
      "-e bash",
      'spec.tasks[1].shell: "-e bash" must start with an absolute path (/bin/bash) or a command name found on PATH (bash), not "-e"',
    ],
    [`/${"x".repeat(256)}`, `spec.tasks[1].shell: "/${"x".repeat(256)}" must be at most 256 characters`],
  ])("refuses %j, naming the field, the value and why", (value, problem) => {
    expect(
      problemsOf({
        tasks: [
          { name: "a", run: "true" },
          { name: "b", run: "true", shell: value },
        ],
      }),
    ).toEqual([problem]);
  });

  it("names spec.shell when it is the spec's that is refused, and refuses a shell that is not text", () => {
    expect(problemsOf({ shell: "./sh", tasks: [{ name: "a", run: "true" }] })).toEqual([
      'spec.shell: "./sh" must start with an absolute path (/bin/bash) or a command name found on PATH (bash), not "./sh"',
    ]);
    expect(problemsOf({ tasks: [{ name: "a", run: "true", shell: ["bash"] }] })).toEqual([
      'spec.tasks[0].shell: must be the shell\'s words as one string, such as "bash -eo pipefail"',
    ]);
  });

  it("takes the task's own over spec.shell, and neither is sh -c", () => {
    expect(effectiveShell({ shell: "sh" }, 2, "bash -eo pipefail")).toEqual({
      words: ["sh"],
      field: "spec.tasks[2].shell",
      value: "sh",
    });
    expect(effectiveShell({}, 2, "bash -eo pipefail")).toEqual({
      words: ["bash", "-eo", "pipefail"],
      field: "spec.shell",
      value: "bash -eo pipefail",
    });
    expect(effectiveShell({}, 2, undefined)).toBeUndefined();
    expect(describeShell(undefined)).toBe("sh -c");
    expect(describeShell(effectiveShell({}, 0, "bash -eo pipefail"))).toBe("bash -eo pipefail -c");
  });

  it("is the pattern of both CRDs' shell fields (spec.shell, tasks[].shell, finally[].shell)", () => {
    for (const file of ["playbook.dev_playbooks.yaml", "playbook.dev_cronplaybooks.yaml"]) {
      const text = readFileSync(join(import.meta.dirname, "../../crds", file), "utf8");
      const patterns = [...text.matchAll(/^ *shell:\n(?: +.*\n)*? +pattern: '(.*)'$/gm)].map((m) => m[1]);
      expect(patterns, file).toEqual([SHELL_PATTERN, SHELL_PATTERN, SHELL_PATTERN]);
    }
  });

  // The API server checks the CRD's pattern (RE2); JavaScript reads this one the same way.
  it.each([
    "bash -eo pipefail",
    " sh -eu ",
    "/usr/bin/env bash -e",
    "",
    "   ",
    "bash\t-e",
    "a b c d e f g h i",
    "a b c d e f g h",
    "./bash",
    "-e bash",
    "/bin/bash\u00a0-e",
    "bash é",
    "bash\u007f",
  ])("the CRD's pattern and the schema agree on %j", (value) => {
    const crd = new RegExp(SHELL_PATTERN).test(value);
    expect(ShellCommand.safeParse(value).success).toBe(crd);
  });
});
