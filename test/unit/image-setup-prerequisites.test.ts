// A failure to get the project's image (here: no container engine that answers) fails the image
// tests with that reason and never stops the other suites: the image project's global setup used
// to throw, which ends the whole vitest run ("No test files found").
import { spawnSync } from "node:child_process";
import path from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = path.join(import.meta.dirname, "../..");

describe("the image project's setup failing", () => {
  it("fails each image test file with the reason while the unit tests still run", () => {
    const result = spawnSync(
      process.execPath,
      [
        path.join(ROOT, "node_modules/vitest/vitest.mjs"),
        "run",
        "--project",
        "unit",
        "--project",
        "image",
        "test/unit/duration.test.ts",
        "test/image/engine.test.ts",
        "test/image/examples.test.ts",
      ],
      {
        cwd: ROOT,
        encoding: "utf8",
        // docker is asked for and does not answer (this machine's client has no daemon; where a
        // daemon answers, DOCKER_HOST at a dead socket makes it so); nothing is installed.
        env: {
          ...process.env,
          PLAYBOOK_CONTAINER_ENGINE: "docker",
          DOCKER_HOST: "unix:///nonexistent/playbook-no-daemon.sock",
          PLAYBOOK_NO_INSTALL: "1",
          NO_COLOR: "1",
          FORCE_COLOR: "0",
        },
        timeout: 120_000,
      },
    );
    const output = `${result.stdout}\n${result.stderr}`;
    expect(result.status, output).toBe(1);
    expect(output).toMatch(/✓ \|unit\| test\/unit\/duration\.test\.ts \(\d+ tests\)/);
    expect(output).not.toContain("No test files found");
    for (const file of ["engine", "examples"]) {
      expect(output).toMatch(new RegExp(`FAIL +\\|image\\| test/image/${file}\\.test\\.ts`));
    }
    // Where a docker client is installed, it is said not to answer; elsewhere, not to be there.
    const reason =
      /Error: the project's image could not be built or run: No (working )?container engine: docker (is on PATH but does not answer|\(PLAYBOOK_CONTAINER_ENGINE\) is not on PATH)/g;
    expect(output.match(reason), output).toHaveLength(2);
    expect(output).toMatch(/Test Files +2 failed \| 1 passed \(3\)/);
  });
});
