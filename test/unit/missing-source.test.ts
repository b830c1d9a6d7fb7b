// A Secret, ConfigMap or key a task names that does not exist ends the run at once, in the
// kubelet's words, not after the start timeout. A pure decision over the observed pod.
import { describe, expect, it } from "vitest";
import type { PodView } from "../../src/controller/objects.js";
import { decide, type ReconcileInput } from "../../src/controller/playbook/reconcile.js";
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
      "pod nightly-1 (attempt 1) cannot start: container task-2 (image runner:test): CreateContainerConfigError: couldn't find key password in Secret ops/db (a Secret, ConfigMap or key the tasks name that does not exist; mark the reference optional: true where it may be missing)",
    );
    expect(decision.actions).toEqual([{ type: "deletePod", name: "nightly-1", why: "finished" }]);
  });

  it("keeps waiting on any other reason, within the start timeout", () => {
    const decision = decideHeld("ContainerCreating", "");
    expect(decision.finished).toBeUndefined();
    expect(decision.actions).toEqual([]);
  });
});
