// `playbook submit --watch` exits with the code of every reason, against the real API server with
// the controller and the scripted node (which has no kubelet, so no log: the watch says so once and
// ends on the Playbook's terminal condition). The runner's lines and logs are test/real-node/cli-watch.test.ts's.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { stringify } from "yaml";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { startCli } from "../support/cli.js";
import { EXIT_CASES } from "./cli-exit-cases.js";
import {
  clients,
  createPlaybook,
  playbookManifest,
  type RunningController,
  startController,
  waitForPlaybook,
} from "./support.js";

const { core } = clients();
let namespace: string;
let controller: RunningController;

beforeAll(async () => {
  namespace = await createTestNamespace(core, "pb-cli-watch");
  controller = startController([namespace]);
});
afterAll(async () => {
  await controller?.stop();
  await deleteTestNamespace(core, namespace);
});

describe("playbook submit --watch exits with the code of the run's reason", () => {
  it.concurrent.for(EXIT_CASES)("$name exits $code", async (watchCase) => {
    const name = `watch-${watchCase.name.toLowerCase()}`;
    const file = path.join(mkdtempSync(path.join(tmpdir(), "cli-watch-")), "playbook.yaml");
    writeFileSync(file, stringify(playbookManifest(name, watchCase.spec)));
    const watching = startCli(["submit", "-f", file, "--watch", "-n", namespace], {
      env: { KUBECONFIG: inject("kubeconfig") },
    });
    await watchCase.script(namespace, name);
    const result = await watching;
    expect(result.stderr).toMatch(new RegExp(`^playbook: run ${watchCase.ending}`, "m"));
    expect(result.code, result.stderr).toBe(watchCase.code);
    expect(result.stdout).toBe(`${name}\n`);
    // Before the pod ran: the controller's words.
    if (watchCase.name === "StartTimeout") {
      expect(result.stderr).toMatch(/ Pending: pod \S+ is pending \(attempt 1\): Unschedulable: /);
      // A pod on no node has no log yet (the API server answers 204): waited for, not a failure.
      expect(result.stderr).not.toContain("cannot read");
    }
  });
});

describe("playbook logs without a log to read", () => {
  const logs = (args: string[]) =>
    startCli(["logs", ...args, "-n", namespace], { env: { KUBECONFIG: inject("kubeconfig") } });

  it("says a run that ended before any pod ran has no log (exit 0)", async () => {
    await createPlaybook(namespace, "never-ran", { ceiling: "48h", tasks: [{ name: "a", run: "true" }] });
    await waitForPlaybook(namespace, "never-ran", "to end InvalidSpec", (p) =>
      Boolean(p.status?.conditions?.some((c) => c.reason === "InvalidSpec")),
    );
    const result = await logs(["never-ran"]);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toBe("");
    expect(result.stderr).toMatch(
      /^playbook: never-ran ended before any pod ran \(InvalidSpec: .*\): there is no log\n$/,
    );
  });

  it("refuses a task the Playbook does not have, naming its tasks (exit 2)", async () => {
    await createPlaybook(namespace, "two-tasks", {
      tasks: [
        { name: "build", run: "true" },
        { name: "test", run: "true" },
      ],
    });
    const result = await logs(["two-tasks", "--task", "deploy"]);
    expect(result.code).toBe(2);
    expect(result.stdout).toBe("");
    expect(result.stderr).toBe(
      `playbook: --task deploy: playbooks.playbook.dev two-tasks in namespace ${namespace} has no such task (its tasks: build, test)\n`,
    );
  });
});
