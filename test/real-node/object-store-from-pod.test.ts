// The log archive's store from a run's pod on the real node (issue 58: the runner uploads its own
// log through URLs the controller presigns). The pods' network namespace has no route to this
// machine's, where the store listens on loopback; store-on-node.ts relays NODE_API_ADDRESS:PORT in
// the node's namespace to it. A PUT presigned for that endpoint, sent from a pod, stores its body;
// the controller's own endpoint (127.0.0.1:PORT) is the pod's own loopback, where nothing listens;
// and a URL presigned for the controller's endpoint, sent to the pods' address, is refused, since
// SigV4 signs the Host header: the runner's URLs must be signed for the address the pod dials.
import path from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { ArchiveStore } from "../../src/controller/log-archive/archive-store.js";
import { type ArchiveOnStore, startArchiveOnStore } from "../harness/archive-on-store.js";
import { clusterClients, createTestNamespace, deleteTestNamespace } from "../harness/cluster-test.js";
import { NODE_API_ADDRESS } from "../harness/real-node/real-node.js";
import { putFromPod } from "../support/put-from-pod.js";

const { core } = clusterClients();
let namespace = "";
let archive: ArchiveOnStore;
let podEndpoint = "";
const clients: ArchiveStore[] = [];

/** The store's client, its URLs presigned for `endpoint` (the pods' or the controller's). */
function presignerFor(endpoint: string): ArchiveStore {
  const { store } = archive;
  const client = new ArchiveStore({
    endpoint,
    bucket: store.bucket,
    region: store.region,
    prefix: "",
    forcePathStyle: true,
    credentials: { accessKeyId: store.accessKeyId, secretAccessKey: store.secretAccessKey },
  });
  clients.push(client);
  return client;
}

beforeAll(async () => {
  archive = await startArchiveOnStore(inject("binDir"), "rn-store-from-pod", {
    node: path.dirname(inject("kubeconfig")),
  });
  podEndpoint = archive.podEndpoint ?? "";
  namespace = await createTestNamespace(core, "rn-store-from-pod");
}, 120_000);

afterAll(async () => {
  for (const client of clients) client.destroy();
  if (namespace) await deleteTestNamespace(core, namespace);
  await archive?.stop();
});

describe("the log archive's store from a pod on the real node", () => {
  it("is published at the node's address on the store's own port, for the controller's --log-archive-pod-endpoint", () => {
    const storePort = new URL(archive.store.endpoint).port;
    expect(podEndpoint).toBe(`http://${NODE_API_ADDRESS}:${storePort}`);
    expect(archive.controllerOptions.logArchivePodEndpoint).toBe(podEndpoint);
  });

  it("takes a PUT from the pod through a URL presigned for the pods' endpoint", async () => {
    const key = "from-pod/attempt-1.log";
    const url = await presignerFor(podEndpoint).presignPut(key, 300);
    expect(new URL(url).host).toBe(new URL(podEndpoint).host);
    const put = await putFromPod(core, namespace, "put", url, "from the pod\n");
    expect(put).toEqual({ phase: "Succeeded", output: "status 200\n" });
    expect((await archive.readObject(key)).toString("utf8")).toBe("from the pod\n");
  });

  it("is out of the pod's reach at the controller's own endpoint (127.0.0.1:PORT)", async () => {
    const key = "from-pod/loopback.log";
    const url = await presignerFor(archive.store.endpoint).presignPut(key, 300);
    expect(new URL(url).hostname).toBe("127.0.0.1");
    const put = await putFromPod(core, namespace, "loopback", url, "never stored\n");
    expect(put).toEqual({ phase: "Failed", output: "error ECONNREFUSED\n" });
    expect((await archive.readObject(key)).length).toBe(0);
  });

  it("refuses, at the pods' endpoint, a URL presigned for the controller's: the signature names the host", async () => {
    const key = "from-pod/other-host.log";
    const signed = new URL(await presignerFor(archive.store.endpoint).presignPut(key, 300));
    signed.host = new URL(podEndpoint).host;
    const put = await putFromPod(core, namespace, "other-host", signed.toString(), "never stored\n");
    expect(put).toEqual({ phase: "Failed", output: "status 403\n" });
    expect((await archive.readObject(key)).length).toBe(0);
  });
});
