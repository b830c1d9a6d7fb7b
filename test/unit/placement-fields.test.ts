// The placement fields of a Playbook's spec (nodeSelector, tolerations, affinity, runtimeClassName,
// imagePullSecrets, podMetadata) as a user writes them: what is accepted, and each refusal naming
// the field and the value, as the API server names a Pod's.
import { describe, expect, it } from "vitest";
import { LOCAL_DEFAULTS } from "../../src/api/limits.js";
import { InvalidPlaybookError, parsePlaybookManifest } from "../../src/api/manifest.js";

const header =
  "apiVersion: playbook.dev/v1alpha1\nkind: Playbook\nmetadata:\n  name: demo\nspec:\n  tasks: [{name: a, run: 'true'}]\n";

function problemsOf(spec: string): string[] {
  try {
    parsePlaybookManifest(`${header}${spec}`, LOCAL_DEFAULTS, "demo.yaml");
  } catch (error) {
    if (error instanceof InvalidPlaybookError) return error.problems.map((p) => `${p.path}: ${p.message}`);
    throw error;
  }
  return [];
}

describe("the placement fields of a Playbook", () => {
  it("accepts every field as a Pod takes it", () => {
    expect(
      problemsOf(`  nodeSelector: {pool: batch, kubernetes.io/arch: amd64}
  tolerations:
    - {key: dedicated, operator: Equal, value: batch, effect: NoSchedule}
    - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 30}
    - {operator: Exists}
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms: [{matchExpressions: [{key: zone, operator: In, values: [a, b]}]}]
      preferredDuringSchedulingIgnoredDuringExecution:
        - {weight: 10, preference: {matchExpressions: [{key: cores, operator: Gt, values: ["4"]}]}}
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - {labelSelector: {matchLabels: {app: db}}, topologyKey: kubernetes.io/hostname}
  runtimeClassName: gvisor
  imagePullSecrets: [{name: registry-cred}]
  podMetadata:
    labels: {team: payments, cost-center: "42"}
    annotations: {sidecar.istio.io/inject: "false", example.com/note: "any text at all"}
`),
    ).toEqual([]);
  });

  it.each([
    [
      "a node selector key that is no label key",
      "  nodeSelector: {'bad key': x}\n",
      'spec.nodeSelector.bad key: "bad key" must be a qualified name',
    ],
    [
      "a node selector value that is no label value",
      "  nodeSelector: {pool: 'a b'}\n",
      'spec.nodeSelector.pool: "a b" must be a label value',
    ],
    [
      "a label key with a bad prefix",
      "  nodeSelector: {'Example.com/x': y}\n",
      'the prefix "Example.com" must be a DNS-1123 subdomain',
    ],
    [
      "a toleration operator",
      "  tolerations: [{key: k, operator: Maybe}]\n",
      'spec.tolerations[0].operator: "Maybe" must be Exists or Equal',
    ],
    [
      "a toleration effect",
      "  tolerations: [{key: k, value: v, effect: NoWay}]\n",
      'spec.tolerations[0].effect: "NoWay" must be NoSchedule, PreferNoSchedule or NoExecute',
    ],
    [
      "an Exists toleration with a value",
      "  tolerations: [{key: k, operator: Exists, value: v}]\n",
      'spec.tolerations[0].value: "v" must be empty when the operator is Exists',
    ],
    [
      "a keyless Equal toleration",
      "  tolerations: [{value: v}]\n",
      'spec.tolerations[0].operator: "Equal" must be Exists when the key is empty',
    ],
    [
      "tolerationSeconds without NoExecute",
      "  tolerations: [{key: k, operator: Exists, effect: NoSchedule, tolerationSeconds: 5}]\n",
      "spec.tolerations[0].tolerationSeconds: 5 is allowed only with effect NoExecute",
    ],
    [
      "a node affinity operator",
      "  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: z, operator: Near, values: [a]}]}]}}}\n",
      'operator: "Near" must be one of In, NotIn, Exists, DoesNotExist, Gt, Lt',
    ],
    [
      "In without values",
      "  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: z, operator: In}]}]}}}\n",
      "matchExpressions[0].values: must not be empty with In",
    ],
    [
      "an affinity term without a topology key",
      "  affinity: {podAffinity: {requiredDuringSchedulingIgnoredDuringExecution: [{labelSelector: {matchLabels: {a: b}}, topologyKey: ''}]}}\n",
      "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: must not be empty",
    ],
    [
      "a weight out of range",
      "  affinity: {nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 0, preference: {}}]}}\n",
      "weight: 0 must be from 1 to 100",
    ],
    [
      "an unknown affinity field",
      "  affinity: {nodeAffinty: {}}\n",
      "spec.affinity.nodeAffinty: unknown field",
    ],
    [
      "a runtime class that is no name",
      "  runtimeClassName: Not_A_Name\n",
      'spec.runtimeClassName: "Not_A_Name" must be a DNS-1123 subdomain',
    ],
    [
      "a pull secret that is no name",
      "  imagePullSecrets: [{name: 'a b'}]\n",
      'spec.imagePullSecrets[0].name: "a b" must be a DNS-1123 subdomain',
    ],
    [
      "a pod label value that is no label value",
      "  podMetadata: {labels: {team: 'two words'}}\n",
      'spec.podMetadata.labels.team: "two words" must be a label value',
    ],
    [
      "an annotation key that is no qualified name",
      "  podMetadata: {annotations: {'a/b/c': x}}\n",
      'spec.podMetadata.annotations.a/b/c: "a/b/c" must be a qualified name',
    ],
  ])("refuses %s, naming the field and the value", (_, spec, expected) => {
    expect(problemsOf(spec).join("\n")).toContain(expected);
  });

  it.each([
    ["labels", "playbook.dev/name", "playbook.dev/*"],
    ["labels", "kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/*"],
    ["labels", "pod-template-hash", "pod-template-hash"],
    ["labels", "sub.playbook.dev/x", "playbook.dev/*"],
    ["annotations", "playbook.dev/plan", "playbook.dev/*"],
    ["annotations", "kubectl.kubernetes.io/default-container", "kubectl.kubernetes.io/default-container"],
    ["annotations", "Kueue.x-k8s.io/workload", "kueue.x-k8s.io/*"],
  ])("refuses the reserved %s key %s, naming it", (kind, key, reserved) => {
    const problems = problemsOf(`  podMetadata: {${kind}: {'${key}': x}}\n`);
    expect(problems).toEqual([
      `spec.podMetadata.${kind}.${key}: ${JSON.stringify(key)} is reserved (${reserved}): the controller, Kueue or Kubernetes sets this ${kind.slice(0, -1)} on the pod`,
    ]);
  });
});
