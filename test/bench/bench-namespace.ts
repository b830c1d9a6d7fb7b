// The namespace the real-node benches (bench:images, bench:kueue) run their Playbooks in: made,
// its default service account there (pods are refused until it is), and a PlaybookPolicy that
// lets tasks run the test task images.
import type { CoreV1Api, CustomObjectsApi } from "@kubernetes/client-node";
import { GROUP, VERSION } from "../../src/api/playbook.js";
import { waitFor } from "../harness/processes.js";

export async function createBenchNamespace(core: CoreV1Api, custom: CustomObjectsApi, namespace: string) {
  await core.createNamespace({ body: { metadata: { name: namespace } } });
  await waitFor(
    "the default service account",
    async () => {
      await core.readNamespacedServiceAccount({ namespace, name: "default" });
      return true;
    },
    { timeoutMs: 30_000 },
  );
  await custom.createNamespacedCustomObject({
    group: GROUP,
    version: VERSION,
    namespace,
    plural: "playbookpolicies",
    body: {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: "PlaybookPolicy",
      metadata: { name: "default", namespace },
      spec: { allowedImages: ["playbook.test/*"] },
    },
  });
}
