// The namespace policy over a run's placement and pod metadata (issue 56 section 2), as the
// controller decides it: its defaults on the pod of a Playbook that sets none, its enforced node
// selector entries and tolerations always on the pod, and InvalidSpec (naming the field, the value
// and the rule) for a conflicting entry, a runtime class or a toleration it does not allow, and a
// key a team may not set.
import { describe, expect, it } from "vitest";
import { PolicySpecSchema } from "../../src/api/policy.js";
import { policyProblems } from "../../src/api/policy-consistency.js";
import { decide, type ReconcileInput } from "../../src/controller/playbook/reconcile.js";
import { createdPod, governed, playbook, SETTINGS, succeeded, T0 } from "./controller-fixtures.js";

function input(partial: Partial<ReconcileInput>): ReconcileInput {
  return { playbook: playbook(), pods: [], now: T0, settings: SETTINGS, ...partial };
}

const BATCH = { key: "dedicated", operator: "Equal", value: "batch", effect: "NoSchedule" };
const rules = governed({
  defaults: {
    nodeSelector: { pool: "general" },
    tolerations: [{ key: "spot", operator: "Exists", effect: "NoSchedule" }],
    runtimeClassName: "gvisor",
    imagePullSecrets: [{ name: "registry-cred" }],
    podMetadata: {
      labels: { "cost-center": "platform" },
      annotations: { "sidecar.istio.io/inject": "false" },
    },
  },
  enforced: { nodeSelector: { "example.com/tenant": "team-a" }, tolerations: [BATCH] },
  allowedRuntimeClasses: ["gvisor", "kata"],
  allowedTolerations: [{ key: "gpu", operator: "Exists" }],
  forbiddenLabelKeys: ["cost-center", "billing.example.com/*"],
  forbiddenAnnotationKeys: ["sidecar.istio.io/inject"],
});

describe("placement under the namespace's policy", () => {
  it("gives a Playbook that sets none the policy's defaults, and the enforced entries always", () => {
    const pod = createdPod(decide(input({ rules })).actions);
    expect(pod.spec).toMatchObject({
      nodeSelector: { pool: "general", "example.com/tenant": "team-a" },
      tolerations: [{ key: "spot", operator: "Exists", effect: "NoSchedule" }, BATCH],
      runtimeClassName: "gvisor",
      imagePullSecrets: [{ name: "registry-cred" }],
    });
    expect(pod.metadata.labels).toMatchObject({ "cost-center": "platform", "playbook.dev/name": "nightly" });
    expect(pod.metadata.annotations["sidecar.istio.io/inject"]).toBe("false");
  });

  it("keeps the Playbook's own fields over the defaults, with the enforced entries added", () => {
    const spec = {
      nodeSelector: { pool: "batch" },
      tolerations: [{ key: "gpu", operator: "Exists", effect: "NoSchedule" }],
      runtimeClassName: "kata",
      podMetadata: { labels: { team: "payments" } },
    };
    const pod = createdPod(decide(input({ playbook: playbook(spec), rules })).actions);
    expect(pod.spec.nodeSelector).toEqual({ pool: "batch", "example.com/tenant": "team-a" });
    expect(pod.spec.tolerations).toEqual([...spec.tolerations, BATCH]);
    expect(pod.spec.runtimeClassName).toBe("kata");
    expect(pod.metadata.labels).toMatchObject({ team: "payments", "cost-center": "platform" });
  });

  it.each([
    {
      name: "a node selector entry that conflicts with an enforced one",
      spec: { nodeSelector: { "example.com/tenant": "team-b" } },
      says: "spec.nodeSelector.example.com/tenant: example.com/tenant=team-b conflicts with example.com/tenant=team-a, which PlaybookPolicy default enforces on every pod (spec.enforced.nodeSelector)",
    },
    {
      name: "a toleration that conflicts with an enforced one",
      spec: { tolerations: [{ key: "dedicated", operator: "Equal", value: "other", effect: "NoSchedule" }] },
      says: "spec.tolerations[0]: dedicated=other:NoSchedule conflicts with dedicated=batch:NoSchedule, which PlaybookPolicy default enforces on every pod (spec.enforced.tolerations)",
    },
    {
      name: "a toleration outside allowedTolerations",
      spec: { tolerations: [{ operator: "Exists" }] },
      says: "spec.tolerations[0]: (every taint) is not an allowed toleration: PlaybookPolicy default allows gpu exists (spec.allowedTolerations)",
    },
    {
      name: "a runtime class outside allowedRuntimeClasses",
      spec: { runtimeClassName: "runc-privileged" },
      says: 'spec.runtimeClassName: "runc-privileged" is not an allowed runtime class: PlaybookPolicy default allows gvisor, kata (spec.allowedRuntimeClasses) and its default gvisor',
    },
    {
      name: "a label key the policy forbids",
      spec: { podMetadata: { labels: { "billing.example.com/owner": "me" } } },
      says: 'spec.podMetadata.labels.billing.example.com/owner: "billing.example.com/owner" is a key PlaybookPolicy default does not let a Playbook set (spec.forbiddenLabelKeys: billing.example.com/*)',
    },
    {
      name: "an annotation key the policy forbids",
      spec: { podMetadata: { annotations: { "sidecar.istio.io/inject": "true" } } },
      says: 'spec.podMetadata.annotations.sidecar.istio.io/inject: "sidecar.istio.io/inject" is a key PlaybookPolicy default does not let a Playbook set (spec.forbiddenAnnotationKeys: sidecar.istio.io/inject)',
    },
  ])("refuses $name: InvalidSpec naming both, and no pod", ({ spec, says }) => {
    const decision = decide(input({ playbook: playbook(spec), rules }));
    expect(succeeded(decision.status)).toMatchObject({ status: "False", reason: "InvalidSpec" });
    expect(succeeded(decision.status)?.message).toContain(says);
    expect(decision.actions).toEqual([]);
  });

  it("allows any runtime class and toleration where the policy lists none", () => {
    const open = governed({});
    const spec = { runtimeClassName: "anything", tolerations: [{ operator: "Exists" }] };
    const pod = createdPod(decide(input({ playbook: playbook(spec), rules: open })).actions);
    expect(pod.spec).toMatchObject({ runtimeClassName: "anything", tolerations: [{ operator: "Exists" }] });
  });

  it("refuses a policy whose default node selector contradicts its enforced one, naming both", () => {
    const spec = PolicySpecSchema.parse({
      defaults: { nodeSelector: { pool: "a" } },
      enforced: { nodeSelector: { pool: "b" } },
    });
    expect(policyProblems({ name: "default", spec }, 86_400_000)).toEqual([
      "spec.defaults.nodeSelector.pool: a conflicts with spec.enforced.nodeSelector.pool b",
    ]);
  });

  it("refuses a policy's key pattern that is no key, naming it", () => {
    const parsed = PolicySpecSchema.safeParse({ forbiddenLabelKeys: ["bad key/*"] });
    expect(parsed.success).toBe(false);
    expect(parsed.error?.issues[0]?.message).toBe(
      '"bad key/*" must be a label or annotation key, or a prefix of them ending in "/*"',
    );
  });
});
