// A pod someone changed after its creation (issue 53): an ephemeral container (`kubectl debug`)
// that could reach the runner, or a container whose image changed, and the runner's report is not
// believed; a debug container that can reach only a task's processes leaves the outcome marked
// unverified; one that can reach neither (another user, no capability it could gain) changes
// nothing. And a runner whose terminationMessagePolicy is not File is never read from its log's tail.
import { describe, expect, it } from "vitest";
import type { PodView } from "../../src/controller/objects.js";
import { decide } from "../../src/controller/playbook/reconcile.js";
import { judgePodChanges } from "../../src/controller/pods/changed-pod.js";
import {
  at,
  playbook,
  pod,
  RAN_TASK,
  ran,
  report,
  SUCCEEDED,
  T0,
  TWO_IMAGE_SPEC,
  twoImageInput,
  twoImageStarted,
} from "./controller-fixtures.js";

const SPEC = TWO_IMAGE_SPEC;

/** What `kubectl debug` adds: an ephemeral container, and its status once the kubelet ran it. */
interface Debug {
  securityContext?: Record<string, unknown>;
  volumeMounts?: Record<string, unknown>[];
  /** Seconds after T0 it started; undefined: it never started. Default 5 (while the runner ran). */
  startedAt?: number | null;
}

/** DROP ALL, no privilege escalation: what `kubectl debug --profile=restricted` sets. */
const RESTRICTED = { allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] }, runAsNonRoot: true };

/** The pod of SPEC, its runner ended 1s..10s with a Succeeded report, `debug` added to it. */
function endedPod(
  options: {
    debug?: Debug[];
    change?: (pod: PodView) => PodView;
    runner?: { exitCode: number; reason?: string };
  } = {},
): PodView {
  const base = pod(1, { phase: "Failed", spec: SPEC, startedAt: at(1) });
  const debug = options.debug ?? [];
  const ended: PodView = {
    ...base,
    spec: {
      ...base.spec,
      ...(debug.length > 0
        ? {
            ephemeralContainers: debug.map((d, i) => ({
              name: `debugger-${i}`,
              image: "busybox:1.37",
              targetContainerName: "runner",
              ...(d.securityContext ? { securityContext: d.securityContext } : {}),
              ...(d.volumeMounts ? { volumeMounts: d.volumeMounts } : {}),
            })),
          }
        : {}),
    },
    status: {
      ...base.status,
      containerStatuses: [
        {
          name: "runner",
          restartCount: 0,
          state: {
            terminated: {
              exitCode: 0,
              reason: "Completed",
              startedAt: at(1).toISOString(),
              finishedAt: at(10).toISOString(),
              message: report({ startTime: T0, completionTime: at(9), ...SUCCEEDED }),
              ...options.runner,
            },
          },
        },
        { name: "task-1", restartCount: 0, state: RAN_TASK },
        { name: "task-2", restartCount: 0, state: RAN_TASK },
      ],
      ephemeralContainerStatuses: debug.map((d, i) => {
        const started = d.startedAt === undefined ? 5 : d.startedAt;
        return {
          name: `debugger-${i}`,
          state:
            started === null
              ? { waiting: { reason: "ImagePullBackOff" } }
              : { running: { startedAt: at(started).toISOString() } },
        };
      }),
    },
  };
  return options.change ? options.change(ended) : ended;
}

const withImage = (container: string, image: string) => (p: PodView) => ({
  ...p,
  spec: {
    ...p.spec,
    containers: p.spec?.containers?.map((c) => (c.name === container ? { ...c, image } : c)),
  },
});

interface Row {
  name: string;
  debug?: Debug[];
  change?: (pod: PodView) => PodView;
  verdict: "unchanged" | "changed" | "unverified";
  /** The change's words, for changed and unverified. */
  what?: RegExp;
}

const rows: Row[] = [
  { name: "a pod nobody changed", verdict: "unchanged" },
  {
    name: "debug as the runner's uid (65532): it may signal the runner and reach /proc/PID/root",
    debug: [{ securityContext: { ...RESTRICTED, runAsUser: 65532 } }],
    verdict: "changed",
    what: /^ephemeral container debugger-0 \(target runner\) runs as uid 65532 \(the runner's\)$/,
  },
  {
    name: "debug as root",
    debug: [{ securityContext: { runAsUser: 0, runAsNonRoot: false } }],
    verdict: "changed",
    what: /privileged|runs as root \(uid 0\)/,
  },
  {
    name: "debug privileged, as another uid",
    debug: [{ securityContext: { ...RESTRICTED, runAsUser: 4242, privileged: true } }],
    verdict: "changed",
    what: /is privileged$/,
  },
  {
    name: "debug adding SYS_PTRACE (kubectl debug's general profile)",
    debug: [{ securityContext: { runAsUser: 4242, capabilities: { add: ["SYS_PTRACE"] } } }],
    verdict: "changed",
    what: /adds capabilities SYS_PTRACE$/,
  },
  {
    name: "debug with no securityContext (kubectl debug's legacy profile): the pod's user, but privileges it could gain",
    debug: [{}],
    verdict: "changed",
    what: /runs as uid 65535 but may gain privileges/,
  },
  {
    name: "debug as another uid that drops ALL but allows privilege escalation: nothing to gain",
    debug: [{ securityContext: { runAsUser: 4242, capabilities: { drop: ["ALL"] } } }],
    verdict: "unchanged",
  },
  {
    name: "debug as another uid without privilege escalation, capabilities not dropped: a non-root exec keeps none",
    debug: [{ securityContext: { runAsUser: 4242, allowPrivilegeEscalation: false } }],
    verdict: "unchanged",
  },
  {
    name: "kubectl debug --profile=restricted: the pod's user (the sandbox's, 65535), no capability",
    debug: [{ securityContext: RESTRICTED }],
    verdict: "unchanged",
  },
  {
    name: "debug as an unrelated uid, restricted",
    debug: [{ securityContext: { ...RESTRICTED, runAsUser: 4242 } }],
    verdict: "unchanged",
  },
  {
    name: "debug mounting the runner's socket volume writable",
    debug: [
      {
        securityContext: { ...RESTRICTED, runAsUser: 4242 },
        volumeMounts: [{ name: "playbook-run", mountPath: "/run-dir" }],
      },
    ],
    verdict: "changed",
    what: /mounts volume playbook-run, which the runner writes, writable$/,
  },
  {
    name: "debug mounting the runner's socket volume read-only (as every task does)",
    debug: [
      {
        securityContext: { ...RESTRICTED, runAsUser: 4242 },
        volumeMounts: [{ name: "playbook-run", mountPath: "/run-dir", readOnly: true }],
      },
    ],
    verdict: "unchanged",
  },
  {
    name: "debug as task-2's uid (1001): it reaches that container's tasks, not the runner",
    debug: [{ securityContext: { ...RESTRICTED, runAsUser: 1001 } }],
    verdict: "unverified",
    what: /^ephemeral container debugger-0 \(target runner\) runs as uid 1001 \(task-2's\): it can reach that container's tasks$/,
  },
  {
    name: "debug mounting the workspace writable",
    debug: [
      {
        securityContext: { ...RESTRICTED, runAsUser: 4242 },
        volumeMounts: [{ name: "workspace", mountPath: "/workspace" }],
      },
    ],
    verdict: "unverified",
    what: /mounts volume workspace writable: it can change what tasks read$/,
  },
  {
    name: "a harmless debug container beside one as the runner's uid: the worst decides",
    debug: [{ securityContext: RESTRICTED }, { securityContext: { ...RESTRICTED, runAsUser: 65532 } }],
    verdict: "changed",
    what: /debugger-1 .*runs as uid 65532/,
  },
  {
    name: "debug as the runner's uid that never started (its image never came)",
    debug: [{ securityContext: { ...RESTRICTED, runAsUser: 65532 }, startedAt: null }],
    verdict: "unchanged",
  },
  {
    name: "debug as the runner's uid started after the runner ended (its report was already taken)",
    debug: [{ securityContext: { ...RESTRICTED, runAsUser: 65532 }, startedAt: 11 }],
    verdict: "unchanged",
  },
  {
    name: "debug as the runner's uid started in the second the runner ended: it may have run before",
    debug: [{ securityContext: { ...RESTRICTED, runAsUser: 65532 }, startedAt: 10 }],
    verdict: "changed",
  },
  {
    name: "a task container's image changed (kubectl set image)",
    change: withImage("task-2", "attacker.example/psql:1"),
    verdict: "changed",
    what: /^container task-2 runs image attacker\.example\/psql:1, the controller built it with postgres:16$/,
  },
  {
    name: "a container the kubelet restarted (its definition changed, then changed back)",
    change: (p) => ({
      ...p,
      status: {
        ...p.status,
        containerStatuses: p.status?.containerStatuses?.map((s) =>
          s.name === "runner" ? { ...s, restartCount: 1 } : s,
        ),
      },
    }),
    verdict: "changed",
    what: /^container runner was restarted \(restartCount 1\)/,
  },
];

describe("judgePodChanges", () => {
  it.each(rows)("$name: $verdict", ({ debug, change, verdict, what }) => {
    const ended = endedPod({ ...(debug ? { debug } : {}), ...(change ? { change } : {}) });
    const judged = judgePodChanges(ended, at(10).toISOString());
    expect(judged.verdict).toBe(verdict);
    if (judged.verdict === "changed") expect(judged.change.what).toMatch(what ?? /./);
    if (judged.verdict === "unverified")
      expect(judged.changes.map((c) => c.what).join("; ")).toMatch(what ?? /./);
  });

  it("compares the runner's image with the agent's image volume, where the agent comes that way", () => {
    const ended = endedPod();
    const volumes = [
      ...((ended.spec?.volumes as Record<string, unknown>[]) ?? []).filter(
        (v) => v.name !== "playbook-agent",
      ),
      { name: "playbook-agent", image: { reference: "runner:test" } },
    ];
    const imaged = { ...ended, spec: { ...ended.spec, volumes } };
    expect(judgePodChanges(imaged).verdict).toBe("unchanged");
    const changed = withImage("runner", "attacker.example/runner:1")(imaged);
    expect(judgePodChanges(changed)).toMatchObject({
      verdict: "changed",
      change: {
        what: "container runner runs image attacker.example/runner:1, the controller built it with runner:test",
      },
    });
  });
});

describe("a run whose pod was changed", () => {
  const input = twoImageInput;
  const started = twoImageStarted;
  const decideEnded = (ended: PodView) =>
    decide(input({ playbook: playbook(SPEC, started()), pods: [ended], now: at(20) }));

  it("ends RunnerLost, not with the report's Succeeded, naming the debug container that runs as the runner's uid", () => {
    const decision = decideEnded(
      endedPod({ debug: [{ securityContext: { ...RESTRICTED, runAsUser: 65532 } }] }),
    );
    const condition = decision.status?.conditions?.find((c) => c.type === "Succeeded");
    expect(condition).toMatchObject({ status: "False", reason: "RunnerLost" });
    expect(condition?.message).toBe(
      "pod nightly-1 ended without a valid runner report (Completed, exit code 0): the pod was changed after its creation: ephemeral container debugger-0 (target runner) runs as uid 65532 (the runner's), so the runner's termination message is not trusted as its report",
    );
    expect((decision.status?.tasks ?? []).filter((t) => t.phase === "Succeeded")).toEqual([]);
    expect(decision.finished).toMatchObject({ reason: "RunnerLost", distrust: "changed" });
    expect(decision.events).toContainEqual({
      type: "Warning",
      reason: "PodChanged",
      message:
        "Pod nightly-1 was changed after its creation: ephemeral container debugger-0 (target runner) runs as uid 65532 (the runner's): its runner's report is not trusted, and the run ends RunnerLost",
      once: "pod-changed/pod-uid-1/ephemeral/debugger-0",
    });
  });

  it("says so with a Warning while the run still runs", () => {
    const running = endedPod({ debug: [{ securityContext: { ...RESTRICTED, runAsUser: 65532 } }] });
    const live: PodView = {
      ...running,
      status: {
        ...running.status,
        phase: "Running",
        containerStatuses: running.status?.containerStatuses?.map((s) => ({
          ...s,
          state: { running: { startedAt: at(1).toISOString() } },
        })),
      },
    };
    const decision = decide(input({ playbook: playbook(SPEC, started()), pods: [live], now: at(6) }));
    expect(decision.finished).toBeUndefined();
    expect(decision.events.filter((e) => e.reason === "PodChanged")).toHaveLength(1);
    // Not before it started: one still pulling its image reaches nothing yet.
    const pulling: PodView = {
      ...live,
      status: {
        ...live.status,
        ephemeralContainerStatuses: [{ name: "debugger-0", state: { waiting: { reason: "ErrImagePull" } } }],
      },
    };
    const waiting = decide(input({ playbook: playbook(SPEC, started()), pods: [pulling], now: at(6) }));
    expect(waiting.events.filter((e) => e.reason === "PodChanged")).toEqual([]);
  });

  it("ends RunnerLost for a task image changed on the live pod", () => {
    const decision = decideEnded(endedPod({ change: withImage("task-2", "attacker.example/psql:1") }));
    const condition = decision.status?.conditions?.find((c) => c.type === "Succeeded");
    expect(condition).toMatchObject({ status: "False", reason: "RunnerLost" });
    expect(condition?.message).toMatch(
      /the pod was changed after its creation: container task-2 runs image attacker\.example\/psql:1, the controller built it with postgres:16/,
    );
  });

  it("keeps the report's outcome for a debug container that cannot reach the runner or a task", () => {
    const decision = decideEnded(
      endedPod({ debug: [{ securityContext: { ...RESTRICTED, runAsUser: 4242 } }] }),
    );
    const condition = decision.status?.conditions?.find((c) => c.type === "Succeeded");
    expect(condition).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(condition?.message ?? "").not.toMatch(/unverified/);
    expect(decision.events.map((e) => e.reason)).not.toContain("PodChanged");
    expect(decision.events.map((e) => e.reason)).not.toContain("OutcomeUnverified");
  });

  it("keeps the report's outcome, marked unverified, for a debug container as a task's uid", () => {
    const decision = decideEnded(
      endedPod({ debug: [{ securityContext: { ...RESTRICTED, runAsUser: 1000 } }] }),
    );
    const condition = decision.status?.conditions?.find((c) => c.type === "Succeeded");
    expect(condition).toMatchObject({ status: "True", reason: "Succeeded" });
    expect(condition?.message).toMatch(
      / \(unverified: the pod was changed after its creation: ephemeral container debugger-0 \(target runner\) runs as uid 1000 \(task-1's\): it can reach that container's tasks\)$/,
    );
    expect(decision.finished).toMatchObject({ reason: "Succeeded" });
    expect(decision.events.find((e) => e.reason === "OutcomeUnverified")).toMatchObject({ type: "Warning" });
    expect(decision.events.find((e) => e.reason === "PodChanged")?.message).toMatch(/marked unverified$/);
  });

  it("never reads a report from a runner whose terminationMessagePolicy is FallbackToLogsOnError and that failed", () => {
    const fallback = (p: PodView): PodView => ({
      ...p,
      spec: {
        ...p.spec,
        containers: p.spec?.containers?.map((c) =>
          c.name === "runner" ? { ...c, terminationMessagePolicy: "FallbackToLogsOnError" } : c,
        ),
      },
    });
    // A task printed a report as its last lines; the runner exited 1 with an empty file.
    const failed = endedPod({ change: fallback, runner: { exitCode: 1, reason: "Error" } });
    const status = failed.status?.containerStatuses?.[0];
    if (status?.state?.terminated) {
      status.state.terminated.message = report({
        startTime: T0,
        completionTime: at(9),
        phase: "Failed",
        reason: "TaskFailed",
        tasks: [{ ...ran("build", 2, 5), phase: "Failed", exitCode: 3 }, ran("test", 5, 9)],
      });
    }
    const decision = decideEnded(failed);
    const condition = decision.status?.conditions?.find((c) => c.type === "Succeeded");
    expect(condition).toMatchObject({ status: "False", reason: "RunnerLost" });
    expect(condition?.message).toMatch(
      /terminationMessagePolicy is FallbackToLogsOnError \(the pod was made before it was File\) and it exited 1, so its termination message may be its log's tail/,
    );
    expect(decision.finished).toMatchObject({ distrust: "log-tail" });
    // Exit 0: the kubelet took the file, never the log.
    const succeeded = decideEnded(endedPod({ change: fallback }));
    expect(succeeded.status?.conditions?.find((c) => c.type === "Succeeded")).toMatchObject({
      status: "True",
    });
  });
});
