// One PUT from a pod of the project's image (it has node; busybox's wget cannot PUT): what the
// tests of the store's reach from the real node's pods share (object-store-from-pod.test.ts,
// dev-cluster-store-on-node.test.ts).
import type { CoreV1Api, V1Pod } from "@kubernetes/client-node";
import { waitForPod } from "../harness/cluster-test.js";
import { projectImageName } from "../harness/real-node/images.js";

/** What the pod prints: `status N`, or `error CODE` when no answer came. */
const PUT_SCRIPT = [
  "fetch(process.env.URL, { method: 'PUT', body: process.env.BODY, signal: AbortSignal.timeout(10000) })",
  "  .then((r) => { console.log('status ' + r.status); process.exit(r.status === 200 ? 0 : 1); })",
  "  .catch((e) => { console.log('error ' + (e.cause?.code ?? e.name)); process.exit(1); });",
].join("\n");

/** Runs pod `name` that PUTs `body` to `url` once; returns its phase and output once it ends. */
export async function putFromPod(
  core: CoreV1Api,
  namespace: string,
  name: string,
  url: string,
  body: string,
): Promise<{ phase?: string; output: string }> {
  await core.createNamespacedPod({
    namespace,
    body: {
      metadata: { name },
      spec: {
        restartPolicy: "Never",
        containers: [
          {
            name: "main",
            image: projectImageName(),
            imagePullPolicy: "IfNotPresent",
            command: ["node", "-e", PUT_SCRIPT],
            env: [
              { name: "URL", value: url },
              { name: "BODY", value: body },
            ],
          },
        ],
      },
    },
  });
  const ended = (pod: V1Pod) => pod.status?.phase === "Succeeded" || pod.status?.phase === "Failed";
  const done = await waitForPod(core, namespace, name, "to end", ended, 90_000);
  const output = await core.readNamespacedPodLog({ namespace, name, container: "main" });
  return { ...(done.status?.phase ? { phase: done.status.phase } : {}), output };
}
