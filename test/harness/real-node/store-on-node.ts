// The object store (object-store.ts, on this machine's loopback) as the real node's pods reach it:
// the pods' network namespace has no route to this machine's, so a pair of relays (relay.ts)
// listens at NODE_API_ADDRESS:PORT in the node's namespace, where every pod's packets to that
// address arrive (the node's own address, behind the pods' default route over the bridge), and
// joins each connection to the store's 127.0.0.1:PORT here. The port is the store's own, so the
// pods' endpoint differs from the controller's in its host only. SigV4 signs the Host header: an
// upload URL for the pods must be presigned for this endpoint, not for the store's.

import type { RecordedProcess } from "../processes.js";
import { stopProcess } from "../processes.js";
import { NODE_API_ADDRESS, publishHostPortOnNode } from "./real-node.js";

export interface StoreOnNode {
  /** http://NODE_API_ADDRESS:PORT: the store from every pod on the real node. */
  podEndpoint: string;
  /** Stops the relays (the store goes on). */
  stop(): Promise<void>;
}

/**
 * Publishes the store at `endpoint` (http://127.0.0.1:PORT) to the pods of the real node of the
 * cluster in `clusterStateDir`; nothing when that cluster has no real node.
 */
export async function publishStoreOnNode(
  clusterStateDir: string,
  endpoint: string,
  /** The dev cluster's: relays that outlive this process, recorded in its state. */
  options: { daemon?: boolean; record?: (process: RecordedProcess) => Promise<void> } = {},
): Promise<StoreOnNode | undefined> {
  const url = new URL(endpoint);
  if (url.hostname !== "127.0.0.1" || url.port === "")
    throw new Error(`the store's endpoint must be http://127.0.0.1:PORT, not ${endpoint}`);
  const port = Number(url.port);
  const relays: RecordedProcess[] = [];
  const published = await publishHostPortOnNode(clusterStateDir, `object-store-${port}`, port, {
    daemon: options.daemon ?? false,
    record: async (process) => {
      relays.push(process);
      await options.record?.(process);
    },
    nodeAddress: NODE_API_ADDRESS,
  });
  if (published.length === 0) return undefined;
  return {
    podEndpoint: `${url.protocol}//${NODE_API_ADDRESS}:${port}`,
    async stop() {
      for (const relay of relays) await stopProcess(relay).catch(() => undefined);
    },
  };
}
