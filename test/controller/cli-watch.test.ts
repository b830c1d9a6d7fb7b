// `playbook submit --watch` exits with the code of every reason, against the real API server with
// the controller and the scripted node (which has no kubelet, so no log: the watch says so once and
// ends on the Playbook's terminal condition). The runner's lines and logs are test/real-node/cli-watch.test.ts's.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import type { V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { stringify } from "yaml";
import { createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import {
  endPod,
  exceedDeadline,
  losePodToGc,
  type ReportScript,
  reportFor,
  reportPod,
  scheduledPod,
  scriptManually,
  startPod,
} from "../harness/scripted-node.js";
import { startCli } from "../support/cli.js";
import {
  clients,
  createPlaybook,
  patchSpec,
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

async function running(name: string): Promise<V1Pod> {
  const pod = await scheduledPod(core, namespace, `${name}-1`);
  const started = await startPod(core, pod);
  await waitForPlaybook(namespace, name, "to be Running", (p) => p.status?.phase === "Running", 30_000);
  return started;
}

const reported =
  (script: ReportScript) =>
  async (name: string): Promise<void> => {
    const pod = await running(name);
    await reportPod(core, pod, reportFor(pod, script));
  };

interface WatchCase {
  name: string;
  spec: Record<string, unknown>;
  script: (name: string) => Promise<void>;
  code: number;
  line: RegExp;
}

const cases: WatchCase[] = [
  {
    name: "Succeeded",
    spec: { ceiling: "1m", tasks: [{ name: "build", run: "make" }] },
    script: reported({ reason: "Succeeded" }),
    code: 0,
    line: /^playbook: run Succeeded \(Succeeded\): /m,
  },
  {
    name: "TaskFailed",
    spec: { ceiling: "1m", tasks: [{ name: "build", run: "exit 3" }] },
    script: reported({ reason: "TaskFailed", at: 0, task: { exitCode: 3, attempts: 1 } }),
    code: 1,
    line: /^playbook: run Failed \(TaskFailed\): task build exited with code 3/m,
  },
  {
    name: "TaskTimeout",
    spec: { ceiling: "1m", killGrace: "1s", tasks: [{ name: "slow", run: "sleep 30", timeout: "2s" }] },
    script: reported({ reason: "TaskTimeout", at: 0 }),
    code: 124,
    line: /^playbook: run Failed \(TaskTimeout\): /m,
  },
  {
    name: "StallLimit",
    spec: { ceiling: "1m", killGrace: "1s", stall: "2s", tasks: [{ name: "quiet", run: "sleep 30" }] },
    script: reported({ reason: "StallLimit", at: 0 }),
    code: 124,
    line: /^playbook: run Failed \(StallLimit\): /m,
  },
  {
    name: "RunCeiling",
    spec: { ceiling: "10s", killGrace: "1s", tasks: [{ name: "long", run: "sleep 30" }] },
    script: reported({ reason: "RunCeiling", at: 0 }),
    code: 124,
    line: /^playbook: run Failed \(RunCeiling\): /m,
  },
  {
    name: "PodDeadlineExceeded",
    spec: { ceiling: "15s", killGrace: "1s", tasks: [{ name: "held", run: "sleep 60" }] },
    script: async (name) => {
      const pod = await scheduledPod(core, namespace, `${name}-1`);
      await scriptManually(core, pod);
      const deadline = pod.spec?.activeDeadlineSeconds ?? 0;
      await startPod(core, pod, new Date(Date.now() - deadline * 1000));
      await waitForPlaybook(namespace, name, "to be Running", (p) => p.status?.phase === "Running", 30_000);
      await exceedDeadline(core, pod);
    },
    code: 124,
    line: /^playbook: run Failed \(PodDeadlineExceeded\): the kubelet stopped pod/m,
  },
  {
    name: "StartTimeout",
    spec: {
      ceiling: "1m",
      startTimeout: "3s",
      resources: { requests: { cpu: "1000" } },
      tasks: [{ name: "never", run: "true" }],
    },
    script: async () => {},
    code: 124,
    line: /^playbook: run Failed \(StartTimeout\): /m,
  },
  {
    name: "Cancelled",
    spec: { ceiling: "1m", killGrace: "1s", tasks: [{ name: "waits", run: "sleep 60" }] },
    script: async (name) => {
      await running(name);
      await patchSpec(namespace, name, { cancel: true });
    },
    code: 130,
    line: /^playbook: run Cancelled \(Cancelled\): /m,
  },
  {
    name: "RunnerLost",
    spec: { ceiling: "1m", tasks: [{ name: "victim", run: "sleep 60" }] },
    script: async (name) => {
      await endPod(core, await running(name), { exitCode: 137 });
    },
    code: 3,
    line: /^playbook: run Failed \(RunnerLost\): /m,
  },
  {
    name: "PodLost",
    spec: { ceiling: "1m", backoffLimit: 0, tasks: [{ name: "waits", run: "sleep 60" }] },
    script: async (name) => {
      await losePodToGc(core, await running(name));
    },
    code: 3,
    line: /^playbook: run Failed \(PodLost\): /m,
  },
  {
    name: "InvalidSpec",
    spec: { ceiling: "48h", tasks: [{ name: "a", run: "true" }] },
    script: async () => {},
    code: 2,
    line: /^playbook: run Failed \(InvalidSpec\): /m,
  },
];

describe("playbook submit --watch exits with the code of the run's reason", () => {
  it.concurrent.for(cases)("$name exits $code", async (watchCase) => {
    const name = `watch-${watchCase.name.toLowerCase()}`;
    const file = path.join(mkdtempSync(path.join(tmpdir(), "cli-watch-")), "playbook.yaml");
    writeFileSync(file, stringify(playbookManifest(name, watchCase.spec)));
    const watching = startCli(["submit", "-f", file, "--watch", "-n", namespace], {
      env: { KUBECONFIG: inject("kubeconfig") },
    });
    await watchCase.script(name);
    const result = await watching;
    expect(result.stderr).toMatch(watchCase.line);
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
