// What the controller observes of where a found pod was placed, for its comparison with the built
// pod (built-pod-difference.ts): the node its nodeName names, and the ResourceFlavors its Kueue
// Workload was admitted with, each read from the API server, never taken from the pod. Asked only
// for a pod found before its record (adoption), which is rare: one read each, no cache. A read that
// fails leaves that part unobserved, and the pod may then carry nothing of it (never adopted).
import { z } from "zod";
import type { ApiClient, CallOptions } from "../../runtime/api-client.js";
import { WORKLOAD_GROUP, WORKLOAD_VERSION } from "../kueue/kueue-names.js";
import type { WorkloadView } from "../kueue/workload-view.js";
import type { PodView } from "../objects.js";
import type {
  KueuePlacement,
  ObservedNode,
  ObservedPlacement,
  RuntimeClassPlacement,
} from "./built-pod-difference.js";

const Labels = z.record(z.string(), z.string());

const NodeSchema = z.looseObject({
  metadata: z.looseObject({ name: z.string(), labels: Labels.optional() }),
  spec: z
    .looseObject({
      taints: z
        .array(z.looseObject({ key: z.string(), value: z.string().optional(), effect: z.string() }))
        .optional(),
    })
    .optional(),
});

const FlavorSchema = z.looseObject({
  metadata: z.looseObject({ name: z.string() }),
  spec: z
    .looseObject({
      nodeLabels: Labels.optional(),
      tolerations: z.array(z.looseObject({})).optional(),
    })
    .optional(),
});

const RuntimeClassSchema = z.looseObject({
  metadata: z.looseObject({ name: z.string() }),
  overhead: z
    .looseObject({ podFixed: z.record(z.string(), z.union([z.string(), z.number()])).optional() })
    .optional(),
  scheduling: z
    .looseObject({ nodeSelector: Labels.optional(), tolerations: z.array(z.looseObject({})).optional() })
    .optional(),
});

/** A RuntimeClass as its admission plugin applies it to a pod; undefined when it is not one. */
export function observedRuntimeClass(raw: unknown): RuntimeClassPlacement | undefined {
  const read = RuntimeClassSchema.safeParse(raw);
  if (!read.success) return undefined;
  const { metadata, overhead, scheduling } = read.data;
  return {
    name: metadata.name,
    ...(overhead?.podFixed ? { overhead: overhead.podFixed } : {}),
    nodeSelector: scheduling?.nodeSelector ?? {},
    tolerations: scheduling?.tolerations ?? [],
  };
}

/** A Node object as the comparison weighs it: its labels and taints; undefined when it is not a Node. */
export function observedNode(raw: unknown): ObservedNode | undefined {
  const node = NodeSchema.safeParse(raw);
  if (!node.success) return undefined;
  return {
    name: node.data.metadata.name,
    labels: node.data.metadata.labels ?? {},
    taints: (node.data.spec?.taints ?? []).map(({ key, value, effect }) => ({ key, value, effect })),
  };
}

/**
 * The ResourceFlavors a Workload was admitted with (every pod set's, every resource's), in
 * order; undefined when it has no admission (Kueue has not admitted it: it adds no placement).
 */
export function admittedFlavors(workload: WorkloadView | undefined): string[] | undefined {
  const assignments = workload?.status?.admission?.podSetAssignments;
  if (!assignments) return undefined;
  return [...new Set(assignments.flatMap((a) => Object.values(a.flavors ?? {})))];
}

/**
 * What Kueue gives a pod it admits to these ResourceFlavors (its pod set's info from the
 * assignment): their node labels, merged, as the pod's node selector, and their tolerations;
 * undefined when one of them is not a ResourceFlavor.
 */
export function kueuePlacement(flavors: readonly unknown[]): KueuePlacement | undefined {
  const nodeSelector: Record<string, string> = {};
  const tolerations: Record<string, unknown>[] = [];
  for (const raw of flavors) {
    const flavor = FlavorSchema.safeParse(raw);
    if (!flavor.success) return undefined;
    Object.assign(nodeSelector, flavor.data.spec?.nodeLabels ?? {});
    tolerations.push(...(flavor.data.spec?.tolerations ?? []));
  }
  return { nodeSelector, tolerations };
}

/** The node and the Kueue admission of a found pod, as the API server shows them now. */
export async function observePlacement(
  api: ApiClient,
  pod: PodView,
  workload: WorkloadView | undefined,
  options?: CallOptions,
): Promise<ObservedPlacement> {
  const read = (path: string) => api.call({ method: "GET", path, options }).catch(() => undefined);
  const nodeName = pod.spec?.nodeName;
  const flavors = admittedFlavors(workload);
  const className = pod.spec?.runtimeClassName;
  const [node, admitted, runtimeClass] = await Promise.all([
    nodeName ? read(`/api/v1/nodes/${encodeURIComponent(nodeName)}`).then(observedNode) : undefined,
    flavors
      ? Promise.all(
          flavors.map((name) =>
            read(`/apis/${WORKLOAD_GROUP}/${WORKLOAD_VERSION}/resourceflavors/${encodeURIComponent(name)}`),
          ),
        ).then(kueuePlacement)
      : undefined,
    className
      ? read(`/apis/node.k8s.io/v1/runtimeclasses/${encodeURIComponent(className)}`).then(
          observedRuntimeClass,
        )
      : undefined,
  ]);
  return {
    ...(node ? { node } : {}),
    ...(admitted ? { kueue: admitted } : {}),
    ...(runtimeClass ? { runtimeClass } : {}),
  };
}
