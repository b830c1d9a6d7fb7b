// The examples in examples/ are what a new user runs first: each must still end the way its
// comment says (the table is test/support/examples.ts, shared with the runs inside the image).
import { spawn } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { startCli } from "../support/cli.js";
import {
  EXAMPLE_OUTCOMES,
  type ExampleOutcome,
  exampleFiles,
  promisedOutcome,
  seenOutcome,
} from "../support/examples.js";
import { MARKER_VAR, newMarker, processesWithEnv } from "../support/runner.js";

const ROOT = join(import.meta.dirname, "../..");

function runExample(
  example: ExampleOutcome,
  marker: string,
): Promise<{ code: number | null; status: Record<string, unknown>; stderr: string }> {
  const child = spawn(
    process.execPath,
    [join(ROOT, "dist/src/cli/main.js"), "run", "-f", join(ROOT, example.file), "-o", "json"],
    { env: { ...process.env, [MARKER_VAR]: marker }, stdio: ["ignore", "pipe", "pipe"] },
  );
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  // With -o json the task's output is on stderr: Ctrl-C once the task says it is waiting.
  let interrupted = false;
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
    if (example.interruptAfter && !interrupted && stderr.includes(example.interruptAfter)) {
      interrupted = child.kill("SIGINT");
    }
  });
  return new Promise((resolve) =>
    child.on("close", (code) => resolve({ code, status: JSON.parse(stdout).status, stderr })),
  );
}

describe("examples", () => {
  it("has an expected outcome for every file in examples/", () => {
    expect(EXAMPLE_OUTCOMES.map((e) => e.file).sort()).toEqual(exampleFiles(ROOT));
  });

  it("examples/policy.yaml is a PlaybookPolicy that gives its defaults and refuses past its maximums", async () => {
    const validate = async (file: string, stdin = "") => {
      const result = await startCli(
        ["validate", "-f", file, "--policy", join(ROOT, "examples/policy.yaml")],
        { stdin },
      );
      return { code: result.code, output: result.stdout + result.stderr };
    };
    const valid = await validate(join(ROOT, "examples/task-timeout.yaml"));
    expect(valid.output).toContain("stall 5m (policy)");
    expect(valid.code).toBe(0);
    const tooLong = await validate(
      "-",
      "apiVersion: playbook.dev/v1alpha1\nkind: Playbook\nmetadata: {name: nightly}\n" +
        "spec: {ceiling: 3h, tasks: [{name: a, run: 'true'}]}\n",
    );
    expect(tooLong.output).toContain(
      "spec.ceiling: 3h is longer than the namespace's maximum ceiling 2h (PlaybookPolicy default, spec.maximums.ceiling)",
    );
    expect(tooLong.code).toBe(2);
  });

  it.concurrent.for(EXAMPLE_OUTCOMES.map((e) => [e.file, e] as const))(
    "%s ends as its comment says",
    async ([, example]) => {
      const marker = newMarker();
      const result = await runExample(example, marker);
      expect(processesWithEnv(MARKER_VAR, marker), "processes of this example still alive").toEqual([]);
      expect(seenOutcome(example, result.code, result.status)).toEqual(promisedOutcome(example));
      // A shell that traps TERM reports the foreground child the group's SIGTERM ended
      // ("[wait] Terminated"): a line no example may leave its user puzzling over.
      expect(result.stderr).not.toMatch(/^(\[[^\]]+\] )?Terminated$/m);
    },
  );
});
