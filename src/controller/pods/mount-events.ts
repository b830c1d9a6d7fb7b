// The kubelet's FailedMount events on a run's pod, read while the pod waits for its volumes
// (missing-source.ts): a secret or configMap volume whose object or key is missing is said there
// alone, never in the pod's status. One list call, narrowed by the API server to the pod and the
// reason; the controller watches no events.
import { z } from "zod";
import type { ApiClient, CallOptions } from "../../runtime/api-client.js";
import type { PodView } from "../objects.js";
import { FAILED_MOUNT_REASON, type MountEvent, MountEventSchema } from "./missing-source.js";

/** Events the kubelet repeats are aggregated into one: a pod has a handful at most. */
const MOUNT_EVENTS_LIMIT = 50;

const EventListSchema = z.looseObject({ items: z.array(z.unknown()).nullable().optional() });

/** The FailedMount events on this pod, as the API server has them now. */
export async function readMountEvents(
  api: ApiClient,
  pod: PodView,
  options?: CallOptions,
): Promise<MountEvent[]> {
  const { namespace = "", uid = "" } = pod.metadata;
  const raw = await api.call({
    method: "GET",
    path: `/api/v1/namespaces/${encodeURIComponent(namespace)}/events`,
    query: {
      fieldSelector: `involvedObject.uid=${uid},reason=${FAILED_MOUNT_REASON}`,
      limit: MOUNT_EVENTS_LIMIT,
    },
    options,
  });
  const list = EventListSchema.safeParse(raw);
  if (!list.success) return [];
  return (list.data.items ?? []).flatMap((item) => {
    const event = MountEventSchema.safeParse(item);
    return event.success ? [event.data] : [];
  });
}
