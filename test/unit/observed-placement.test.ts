// Where a pod found before its run's record was placed, as the controller reads it (issue 53 item
// 1): the node its nodeName names and the flavors its Workload was admitted with, never the pod's
// own word; and the run adopts such a pod only as that reading allows.
import { describe, expect, it } from "vitest";
import type { WorkloadView } from "../../src/controller/kueue/workload-view.js";
import type { PodView } from "../../src/controller/objects.js";
import { decide, type ReconcileInput } from "../../src/controller/playbook/reconcile.js";
import { unbuiltReason } from "../../src/controller/playbook/trusted-pod.js";
import {
  admittedFlavors,
  kueuePlacement,
  observedNode,
  observedRuntimeClass,
} from "../../src/controller/pods/observed-placement.js";
import { at, playbook, SETTINGS, SPEC, T0 } from "./controller-fixtures.js";

const workload = (admission?: unknown): WorkloadView =>
  ({
    metadata: { name: "pod-nightly-1-abcde", ownerReferences: [{ uid: "pod-uid", kind: "Pod" }] },
    status: { conditions: [], ...(admission ? { admission } : {}) },
  }) as WorkloadView;

describe("what the controller reads of a found pod's placement", () => {
  it("takes a RuntimeClass's overhead and scheduling", () => {
    expect(
      observedRuntimeClass({
        metadata: { name: "gvisor" },
        handler: "runsc",
        overhead: { podFixed: { cpu: "250m" } },
        scheduling: {
          nodeSelector: { sandbox: "gvisor" },
          tolerations: [{ key: "sandbox", operator: "Exists" }],
        },
      }),
    ).toEqual({
      name: "gvisor",
      overhead: { cpu: "250m" },
      nodeSelector: { sandbox: "gvisor" },
      tolerations: [{ key: "sandbox", operator: "Exists" }],
    });
    expect(observedRuntimeClass({ metadata: { name: "runc" }, handler: "runc" })).toEqual({
      name: "runc",
      nodeSelector: {},
      tolerations: [],
    });
    expect(observedRuntimeClass({ kind: "Status", code: 404 })).toBeUndefined();
  });

  it("takes a node's labels and taints", () => {
    expect(
      observedNode({
        metadata: { name: "node-a", labels: { pool: "batch" } },
        spec: { taints: [{ key: "gpu", value: "yes", effect: "NoSchedule", timeAdded: null }] },
      }),
    ).toEqual({
      name: "node-a",
      labels: { pool: "batch" },
      taints: [{ key: "gpu", value: "yes", effect: "NoSchedule" }],
    });
    expect(observedNode({ kind: "Status", code: 404 })).toBeUndefined();
  });

  it("takes the flavors of every pod set's resources, once each; none before the admission", () => {
    expect(admittedFlavors(workload())).toBeUndefined();
    expect(admittedFlavors(undefined)).toBeUndefined();
    expect(
      admittedFlavors(
        workload({
          podSetAssignments: [
            { name: "main", flavors: { cpu: "spot", memory: "spot", "nvidia.com/gpu": "a100" } },
          ],
        }),
      ),
    ).toEqual(["spot", "a100"]);
  });

  it("gives the flavors' node labels as the node selector and their tolerations; nothing for a flavor not read", () => {
    const spot = {
      metadata: { name: "spot" },
      spec: { nodeLabels: { pool: "spot" }, tolerations: [{ key: "spot", operator: "Exists" }] },
    };
    const a100 = { metadata: { name: "a100" }, spec: { nodeLabels: { gpu: "a100" } } };
    expect(kueuePlacement([spot, a100])).toEqual({
      nodeSelector: { pool: "spot", gpu: "a100" },
      tolerations: [{ key: "spot", operator: "Exists" }],
    });
    expect(kueuePlacement([{ metadata: { name: "plain" }, spec: {} }])).toEqual({
      nodeSelector: {},
      tolerations: [],
    });
    expect(kueuePlacement([spot, undefined])).toBeUndefined();
  });
});

describe("a pod found before the run's record, bound to a node", () => {
  /** The pod the controller created for the run's first attempt, as the scheduler bound it. */
  function boundPod(): { input: ReconcileInput; pod: PodView } {
    const run = playbook(SPEC);
    const first = decide({ playbook: run, pods: [], now: T0, settings: SETTINGS });
    const created = first.actions.find((a) => a.type === "createPod");
    if (created?.type !== "createPod") throw new Error("no pod created");
    const pod = {
      ...structuredClone(created.pod),
      metadata: {
        ...structuredClone(created.pod.metadata),
        uid: "pod-uid",
        creationTimestamp: T0.toISOString(),
      },
      spec: { ...structuredClone(created.pod.spec), nodeName: "node-a" },
    } as unknown as PodView;
    return { input: { playbook: run, pods: [pod], now: at(1), settings: SETTINGS }, pod };
  }
  const NODE = { name: "node-a", labels: {}, taints: [] };

  it("is the run's pod when the controller saw that node, and the scheduler could have bound it there", () => {
    const { input, pod } = boundPod();
    expect(unbuiltReason({ ...input, placements: { "pod-uid": { node: NODE } } }, pod)).toBeUndefined();
  });

  it("is not when the node was not seen, or its taint keeps the scheduler off it: a pod placed by hand", () => {
    const { input, pod } = boundPod();
    expect(unbuiltReason(input, pod)).toBe('spec.nodeName is "node-a", the controller sets none');
    const control = {
      ...NODE,
      taints: [{ key: "node-role.kubernetes.io/control-plane", effect: "NoSchedule" }],
    };
    expect(unbuiltReason({ ...input, placements: { "pod-uid": { node: control } } }, pod)).toBe(
      'spec.nodeName is "node-a", the controller sets none',
    );
    // Another pod's reading is not this pod's.
    expect(unbuiltReason({ ...input, placements: { "other-uid": { node: NODE } } }, pod)).toBe(
      'spec.nodeName is "node-a", the controller sets none',
    );
  });
});
