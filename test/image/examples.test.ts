// Every example in examples/ run inside the image with `playbook run -f` ends as it does on a
// laptop (the same table as test/runner/examples.test.ts) and leaves no process behind.
import path from "node:path";
import type { StartedTestContainer } from "testcontainers";
import { beforeAll, describe, expect, it } from "vitest";
import { repoRoot } from "../harness/binaries.js";
import { EXAMPLE_OUTCOMES, type ExampleOutcome, promisedOutcome, seenOutcome } from "../support/examples.js";
import { processTable, startImageContainer } from "./support.js";

const EXAMPLES_DIR = "/home/examples";

let container: StartedTestContainer;

beforeAll(async () => {
  container = await startImageContainer((c) =>
    c.withCopyDirectoriesToContainer([{ source: path.join(repoRoot(), "examples"), target: EXAMPLES_DIR }]),
  );
});

/**
 * `playbook run -f FILE -o json` inside the container; for an example that waits to be
 * cancelled, the shell sends SIGINT (what Ctrl-C sends) once the task's line is on stderr.
 */
async function runInImage(
  example: ExampleOutcome,
): Promise<{ code: number; stdout: string; stderr: string }> {
  const file = `${EXAMPLES_DIR}/${path.basename(example.file)}`;
  if (!example.interruptAfter) {
    const result = await container.exec(["playbook", "run", "-f", file, "-o", "json"]);
    return { code: result.exitCode, stdout: result.stdout, stderr: result.stderr };
  }
  const script = `err=$(mktemp); playbook run -f "$1" -o json 2>"$err" & pid=$!
until grep -qF "$2" "$err"; do sleep 0.1; done
kill -INT $pid; wait $pid; code=$?; cat "$err" >&2; exit $code`;
  const result = await container.exec(["sh", "-c", script, "sh", file, example.interruptAfter]);
  return { code: result.exitCode, stdout: result.stdout, stderr: result.stderr };
}

describe("the examples inside the image", () => {
  it.concurrent.for(EXAMPLE_OUTCOMES.map((e) => [e.file, e] as const))(
    "%s ends as its comment says",
    async ([, example]) => {
      const result = await runInImage(example);
      const status = (() => {
        try {
          return JSON.parse(result.stdout).status;
        } catch {
          throw new Error(`no JSON on stdout (exit ${result.code}): ${result.stdout}\n${result.stderr}`);
        }
      })();
      expect(seenOutcome(example, result.code, status)).toEqual(promisedOutcome(example));
    },
  );

  it("leaves only tini and its command running once every example has ended", async () => {
    // Runs after the concurrent examples above (vitest runs a file's tests in order past them).
    const table = await processTable(container);
    expect(table.map((p) => `${p.pid} ${p.comm}`)).toEqual(["1 tini", expect.stringMatching(/^\d+ sleep$/)]);
  });
});
