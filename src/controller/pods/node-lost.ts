// A pod whose node stopped reporting (its kubelet stopped, the node crashed or is cut off). When a
// node misses its heartbeats for kube-controller-manager's --node-monitor-grace-period (50 s by
// default), the node lifecycle controller sets the node's Ready condition Unknown and its pods'
// Ready condition False, and nothing else until the pods' not-ready/unreachable tolerations run
// out (300 s, added by the DefaultTolerationSeconds admission plugin); then it evicts them, but a
// pod stays Terminating as long as its node is silent. When every node of the cluster is silent
// (a one-node cluster whose node is) it evicts nothing at all ("master disruption mode"). Left
// alone, such a run would stay Running until its ceiling's backstop. Pure readers of the pod.
import { z } from "zod";
import { type PodView, RUNNER_CONTAINER } from "../objects.js";

/**
 * How long the controller waits, after the node lifecycle controller marked a running pod not
 * Ready, before it takes the pod as lost with its node: a kubelet that is only slow (it writes
 * the pod's status back within its 10 s status sync) comes back well within it.
 */
export const NODE_SILENCE_MS = 30_000;

const Timestamp = z.union([z.string(), z.date()]);
const NodeMarkSchema = z.looseObject({
  spec: z.looseObject({ nodeName: z.string().optional() }).optional(),
  status: z
    .looseObject({
      conditions: z
        .array(
          z.looseObject({ type: z.string(), status: z.string(), lastTransitionTime: Timestamp.nullish() }),
        )
        .nullish(),
      containerStatuses: z
        .array(
          z.looseObject({
            name: z.string(),
            ready: z.boolean().nullish(),
            state: z.looseObject({ running: z.looseObject({}).nullish() }).nullish(),
          }),
        )
        .nullish(),
    })
    .optional(),
});

export interface NodeSilence {
  node: string;
  /** When the node lifecycle controller marked the pod not Ready (its node's grace had passed). */
  since: number;
  /** When the controller takes the pod as lost: `since` + NODE_SILENCE_MS. */
  lostAt: number;
}

/**
 * The node lifecycle controller's mark on a pod whose node stopped reporting: the pod's Ready
 * condition False while its runner container, as the kubelet last wrote it, runs and is ready.
 * The kubelet never writes that pair (it writes both from the same container states), so it
 * comes from the node controller; a kubelet that is alive writes the condition back. Undefined
 * for any other pod.
 */
export function nodeSilenceOf(pod: PodView): NodeSilence | undefined {
  const parsed = NodeMarkSchema.safeParse(pod).data;
  const node = parsed?.spec?.nodeName;
  if (!parsed || !node) return undefined;
  const ready = parsed.status?.conditions?.find((c) => c.type === "Ready");
  if (ready?.status !== "False" || !ready.lastTransitionTime) return undefined;
  const runner = parsed.status?.containerStatuses?.find((s) => s.name === RUNNER_CONTAINER);
  if (runner?.ready !== true || !runner.state?.running) return undefined;
  const stamp = ready.lastTransitionTime;
  const since = stamp instanceof Date ? stamp.getTime() : Date.parse(stamp);
  if (Number.isNaN(since)) return undefined;
  return { node, since, lostAt: since + NODE_SILENCE_MS };
}
