// Every reason of DESIGN's table as a run on the scripted node, with the exit code the cluster
// commands give for it: the table `wait` (cli-cluster.test.ts) and `submit --watch`
// (cli-watch.test.ts) are both held to. Each script ends the run of that name in the namespace.
import type { V1Pod } from "@kubernetes/client-node";
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
import { clients, patchSpec, waitForPlaybook } from "./support.js";

export interface ExitCase {
  name: string;
  spec: Record<string, unknown>;
  script: (namespace: string, name: string) => Promise<void>;
  code: number;
  /** The run's final line, after `playbook: WHO `: its phase, reason and message. */
  ending: string;
}

const { core } = clients();

/** The run is Running: its pod started and the controller saw it. */
export async function running(namespace: string, name: string): Promise<V1Pod> {
  const pod = await scheduledPod(core, namespace, `${name}-1`);
  const started = await startPod(core, pod);
  await waitForPlaybook(namespace, name, "to be Running", (p) => p.status?.phase === "Running", 30_000);
  return started;
}

/** The run's pod started, then its runner reported (at: the deciding task, task: its outcome). */
const reported =
  (script: ReportScript) =>
  async (namespace: string, name: string): Promise<void> => {
    const pod = await running(namespace, name);
    await reportPod(core, pod, reportFor(pod, script));
  };

export const EXIT_CASES: ExitCase[] = [
  {
    name: "Succeeded",
    spec: { ceiling: "1m", tasks: [{ name: "build", run: "make" }] },
    script: reported({ reason: "Succeeded" }),
    code: 0,
    ending: String.raw`Succeeded \(Succeeded\)`,
  },
  {
    name: "TaskFailed",
    spec: { ceiling: "1m", tasks: [{ name: "build", run: "exit 3" }] },
    script: reported({ reason: "TaskFailed", at: 0, task: { exitCode: 3, attempts: 1 } }),
    code: 1,
    ending: String.raw`Failed \(TaskFailed\): task build exited with code 3`,
  },
  {
    name: "TaskTimeout",
    spec: { ceiling: "1m", killGrace: "1s", tasks: [{ name: "slow", run: "sleep 30", timeout: "2s" }] },
    script: reported({ reason: "TaskTimeout", at: 0 }),
    code: 124,
    ending: String.raw`Failed \(TaskTimeout\): task slow exceeded its 2s timeout`,
  },
  {
    name: "StallLimit",
    spec: { ceiling: "1m", killGrace: "1s", stall: "2s", tasks: [{ name: "quiet", run: "sleep 30" }] },
    script: reported({ reason: "StallLimit", at: 0 }),
    code: 124,
    ending: String.raw`Failed \(StallLimit\): task quiet printed nothing for 2s`,
  },
  {
    name: "RunCeiling",
    spec: { ceiling: "10s", killGrace: "1s", tasks: [{ name: "long", run: "sleep 30" }] },
    script: reported({ reason: "RunCeiling", at: 0 }),
    code: 124,
    ending: String.raw`Failed \(RunCeiling\): task long was stopped by the run's 10s ceiling`,
  },
  {
    name: "PodDeadlineExceeded",
    spec: { ceiling: "15s", killGrace: "1s", tasks: [{ name: "held", run: "sleep 60" }] },
    script: async (namespace, name) => {
      const pod = await scheduledPod(core, namespace, `${name}-1`);
      await scriptManually(core, pod);
      const deadline = pod.spec?.activeDeadlineSeconds ?? 0;
      await startPod(core, pod, new Date(Date.now() - deadline * 1000));
      await waitForPlaybook(namespace, name, "to be Running", (p) => p.status?.phase === "Running", 30_000);
      await exceedDeadline(core, pod);
    },
    code: 124,
    ending: String.raw`Failed \(PodDeadlineExceeded\): the kubelet stopped pod`,
  },
  {
    name: "StartTimeout",
    spec: {
      ceiling: "1m",
      startTimeout: "3s",
      resources: { requests: { cpu: "1000" } },
      tasks: [{ name: "never", run: "true" }],
    },
    // The scheduler keeps the pod Pending.
    script: async () => {},
    code: 124,
    ending: String.raw`Failed \(StartTimeout\): pod \S+ \(attempt 1\) never started`,
  },
  {
    name: "Cancelled",
    spec: { ceiling: "1m", killGrace: "1s", tasks: [{ name: "waits", run: "sleep 60" }] },
    // The scripted node stops the pod at its lowered deadline, as a kubelet would.
    script: async (namespace, name) => {
      await running(namespace, name);
      await patchSpec(namespace, name, { cancel: true });
    },
    code: 130,
    ending: String.raw`Cancelled \(Cancelled\): the run was cancelled \(spec\.cancel\)`,
  },
  {
    name: "RunnerLost",
    spec: { ceiling: "1m", tasks: [{ name: "victim", run: "sleep 60" }] },
    script: async (namespace, name) => {
      await endPod(core, await running(namespace, name), { exitCode: 137 });
    },
    code: 3,
    ending: String.raw`Failed \(RunnerLost\): pod \S+ ended without a valid runner report`,
  },
  {
    name: "PodLost",
    spec: { ceiling: "1m", backoffLimit: 0, tasks: [{ name: "waits", run: "sleep 60" }] },
    script: async (namespace, name) => {
      await losePodToGc(core, await running(namespace, name));
    },
    code: 3,
    ending: String.raw`Failed \(PodLost\): pod \S+ was disrupted`,
  },
  {
    name: "InvalidSpec",
    spec: { ceiling: "48h", tasks: [{ name: "a", run: "true" }] },
    script: async () => {},
    code: 2,
    ending: String.raw`Failed \(InvalidSpec\): .*spec\.ceiling: 48h is longer than the maximum ceiling 24h`,
  },
];
