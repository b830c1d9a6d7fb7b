// A Secret, ConfigMap, claim or key a task names that does not exist ends the run at once, in the
// kubelet's or the scheduler's words, not after the start timeout. A pure decision over the
// observed pod and the kubelet's FailedMount events on it.
import { describe, expect, it } from "vitest";
import type { PodView } from "../../src/controller/objects.js";
import { decide, type ReconcileInput } from "../../src/controller/playbook/reconcile.js";
import { MOUNT_LOOK_INTERVAL_MS, type MountEvent } from "../../src/controller/pods/missing-source.js";
import {
  at,
  SPEC as BASE,
  playbook,
  pod,
  recordedStatus,
  SETTINGS,
  succeeded,
  T0,
} from "./controller-fixtures.js";

const SPEC = {
  tasks: [
    { name: "list", run: "ls" },
    {
      name: "dump",
      run: "pg_dump",
      env: [{ name: "PGPASSWORD", valueFrom: { secretKeyRef: { name: "db", key: "password" } } }],
    },
  ],
};

function input(partial: Partial<ReconcileInput>): ReconcileInput {
  return { playbook: playbook(SPEC), pods: [], now: T0, settings: SETTINGS, ...partial };
}

/** The first pod, with the runner and task-1 running and task-2 (dump's) waiting for `reason`. */
function heldPod(reason: string, message: string): PodView {
  const manifest = pod(1, { phase: "Pending", spec: { ...BASE, ...SPEC } });
  return {
    ...manifest,
    metadata: { ...manifest.metadata, creationTimestamp: T0.toISOString() },
    status: {
      phase: "Pending",
      containerStatuses: [
        { name: "runner", state: { running: {} } },
        { name: "task-1", state: { running: {} } },
        { name: "task-2", state: { waiting: { reason, message } } },
      ],
    },
  };
}

describe("a task naming a Secret or key that does not exist", () => {
  const status = recordedStatus(decide(input({})));
  /** The decision 3s after T0 on the started run, its pod's dump container waiting for `reason`. */
  const decideHeld = (reason: string, message: string) =>
    decide(
      input({
        playbook: playbook(SPEC, structuredClone(status)),
        pods: [heldPod(reason, message)],
        now: at(3),
      }),
    );

  it("ends the run InvalidSpec seconds after the kubelet says so, naming the object and key, and removes the pod", () => {
    const decision = decideHeld("CreateContainerConfigError", "couldn't find key password in Secret ops/db");
    expect(decision.status?.phase).toBe("Failed");
    const condition = succeeded(decision.status);
    expect(condition).toMatchObject({ status: "False", reason: "InvalidSpec" });
    expect(condition?.message).toBe(
      "pod nightly-1 (attempt 1) cannot start: container task-2 (image runner:test): CreateContainerConfigError: couldn't find key password in Secret ops/db (a Secret, ConfigMap, PersistentVolumeClaim or key the tasks name that does not exist; mark a Secret or ConfigMap reference optional: true where it may be missing)",
    );
    expect(decision.actions).toEqual([{ type: "deletePod", name: "nightly-1", why: "finished" }]);
  });

  it("keeps waiting on any other reason, within the start timeout", () => {
    const decision = decideHeld("ContainerCreating", "");
    expect(decision.finished).toBeUndefined();
    expect(decision.actions).toEqual([]);
  });
});

const VOLUME_SPEC = {
  volumes: [
    { name: "creds", secret: { secretName: "db" } },
    { name: "maybe", secret: { secretName: "later", optional: true } },
    { name: "dumps", persistentVolumeClaim: { claimName: "dumps" } },
  ],
  tasks: [
    {
      name: "dump",
      run: "pg_dump",
      volumeMounts: [
        { name: "creds", mountPath: "/creds", readOnly: true },
        { name: "maybe", mountPath: "/maybe", readOnly: true },
        { name: "dumps", mountPath: "/dumps" },
      ],
    },
  ],
};

/** The first pod of VOLUME_SPEC on node-a, every container waiting ContainerCreating, unless told. */
function mountingPod(
  status: {
    conditions?: NonNullable<PodView["status"]>["conditions"];
    containers?: string;
    nodeName?: string;
  } = {},
): PodView {
  const manifest = pod(1, {
    phase: "Pending",
    spec: { ...BASE, ...VOLUME_SPEC },
    nodeName: status.nodeName ?? "node-a",
  });
  const waiting = status.containers ?? "ContainerCreating";
  return {
    ...manifest,
    metadata: { ...manifest.metadata, creationTimestamp: T0.toISOString() },
    status: {
      phase: "Pending",
      ...(status.conditions ? { conditions: status.conditions } : {}),
      containerStatuses: ["runner", "task-1"].map((name) => ({
        name,
        state: waiting === "running" ? { running: {} } : { waiting: { reason: waiting } },
      })),
    },
  };
}

/** A FailedMount event of the kubelet on the first pod. */
function failedMount(message: string, overrides: Partial<MountEvent> = {}): MountEvent {
  return {
    reason: "FailedMount",
    message,
    involvedObject: { uid: "pod-uid-1" },
    source: { component: "kubelet" },
    ...overrides,
  };
}

describe("a volume or claim naming what does not exist", () => {
  const spec = { ...BASE, ...VOLUME_SPEC };
  const status = recordedStatus(decide({ playbook: playbook(spec), pods: [], now: T0, settings: SETTINGS }));
  const decideWith = (held: PodView, events?: readonly MountEvent[]) =>
    decide({
      playbook: playbook(spec, structuredClone(status)),
      pods: [held],
      now: at(3),
      settings: SETTINGS,
      ...(events ? { mountEvents: { "pod-uid-1": events } } : {}),
    });
  const MISSING_SECRET = 'MountVolume.SetUp failed for volume "creds" : secret "db" not found';

  it.each([
    ["a missing Secret", MISSING_SECRET],
    [
      "a missing key",
      'MountVolume.SetUp failed for volume "creds" : references non-existent secret key: password',
    ],
    ["a missing ConfigMap", 'MountVolume.SetUp failed for volume "creds" : configmap "settings" not found'],
  ])(
    "ends the run InvalidSpec seconds after the kubelet's FailedMount for %s, in its words",
    (_case, message) => {
      const decision = decideWith(mountingPod(), [failedMount(message)]);
      const condition = succeeded(decision.status);
      expect(condition).toMatchObject({ status: "False", reason: "InvalidSpec" });
      expect(condition?.message).toContain(`cannot start: kubelet: FailedMount: ${message} (`);
      expect(decision.actions).toEqual([{ type: "deletePod", name: "nightly-1", why: "finished" }]);
    },
  );

  it.each([
    ["no event yet", []],
    [
      "a slow API server",
      [
        failedMount(
          'MountVolume.SetUp failed for volume "creds" : failed to sync secret cache: timed out waiting for the condition',
        ),
      ],
    ],
    [
      "the token volume's CA, which lags a new namespace",
      [
        failedMount(
          'MountVolume.SetUp failed for volume "serviceaccount-token" : configmap "kube-root-ca.crt" not found',
        ),
      ],
    ],
    [
      "an optional volume",
      [failedMount('MountVolume.SetUp failed for volume "maybe" : secret "later" not found')],
    ],
    ["another pod's event", [failedMount(MISSING_SECRET, { involvedObject: { uid: "pod-uid-9" } })]],
    ["an event not from the kubelet", [failedMount(MISSING_SECRET, { source: { component: "someone" } })]],
  ])("keeps waiting on %s, and reads the events again within seconds", (_case, events) => {
    const decision = decideWith(mountingPod(), events);
    expect(decision.finished).toBeUndefined();
    expect(decision.actions).toEqual([]);
    expect(decision.requeueAfterMs).toBeLessThanOrEqual(MOUNT_LOOK_INTERVAL_MS);
  });

  it("takes no earlier FailedMount as news once the volumes are mounted (the sandbox is ready, an image pulls)", () => {
    const mounted = mountingPod({
      conditions: [{ type: "PodReadyToStartContainers", status: "True" }],
    });
    const decision = decideWith(mounted, [failedMount(MISSING_SECRET)]);
    expect(decision.finished).toBeUndefined();
    const started = decideWith(mountingPod({ containers: "ErrImagePull" }), [failedMount(MISSING_SECRET)]);
    expect(started.finished).toBeUndefined();
  });

  it("ends the run InvalidSpec when the scheduler finds no claim of that name, in its words", () => {
    const message =
      '0/1 nodes are available: persistentvolumeclaim "dumps" not found. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.';
    const unscheduled = mountingPod({
      nodeName: "",
      conditions: [{ type: "PodScheduled", status: "False", reason: "Unschedulable", message }],
    });
    const condition = succeeded(decideWith(unscheduled).status);
    expect(condition).toMatchObject({ status: "False", reason: "InvalidSpec" });
    expect(condition?.message).toContain(
      `cannot start: scheduler: PodScheduled=False Unschedulable: ${message} (`,
    );
  });

  it.each([
    [
      "not bound yet",
      "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
    ],
    [
      "waiting for its first consumer",
      "0/1 nodes are available: 1 node(s) didn't find available persistent volumes to bind.",
    ],
    [
      "being provisioned",
      'running PreBind plugin "VolumeBinding": binding volumes: provisioning failed for PVC "dumps"',
    ],
  ])("keeps waiting on a claim %s", (_case, message) => {
    const unscheduled = mountingPod({
      nodeName: "",
      conditions: [{ type: "PodScheduled", status: "False", reason: "Unschedulable", message }],
    });
    const decision = decideWith(unscheduled);
    expect(decision.finished).toBeUndefined();
    expect(decision.actions).toEqual([]);
  });
});
