// A TCP proxy in front of the API server that can be frozen: every connection through it, open
// or new, stops carrying bytes without being closed, as a dead network path or a stopped relay
// does. A client with no deadline waits on such a connection forever. It can also be cut (every
// connection closed, new ones refused, as a stopped API server does) and restored.
import net from "node:net";
import { KubeConfig } from "@kubernetes/client-node";

export interface FreezableProxy {
  /** A kubeconfig like the given one whose cluster is reached through the proxy. */
  kubeConfig: KubeConfig;
  freeze(): void;
  /** Closes every connection and stops listening: connecting is refused until restore(). */
  cut(): Promise<void>;
  /** Listens again on the same port and forwards again, after freeze() or cut(). */
  restore(): Promise<void>;
  close(): Promise<void>;
}

export async function startFreezableProxy(through: KubeConfig): Promise<FreezableProxy> {
  const cluster = through.getCurrentCluster();
  if (!cluster) throw new Error("the kubeconfig names no cluster");
  const upstream = new URL(cluster.server);
  const sockets = new Set<net.Socket>();
  let frozen = false;
  const server = net.createServer((client) => {
    sockets.add(client);
    client.on("close", () => sockets.delete(client));
    client.on("error", () => {});
    // A frozen proxy still accepts connections but forwards nothing: the TLS handshake hangs.
    if (frozen) return client.pause();
    const api = net.connect(Number(upstream.port || 443), upstream.hostname);
    sockets.add(api);
    api.on("close", () => sockets.delete(api));
    api.on("error", () => client.destroy());
    client.on("error", () => api.destroy());
    client.on("close", () => api.destroy());
    api.on("close", () => client.destroy());
    client.pipe(api);
    api.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromOptions({
    clusters: [{ ...cluster, server: `${upstream.protocol}//127.0.0.1:${port}` }],
    users: through.users,
    contexts: through.contexts,
    currentContext: through.getCurrentContext(),
  });
  return {
    kubeConfig,
    freeze() {
      frozen = true;
      for (const socket of sockets) {
        socket.unpipe();
        socket.pause();
      }
    },
    async cut() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of sockets) socket.destroy();
      await closed;
    },
    async restore() {
      // Frozen connections stay dead: a client gives up on them and connects anew.
      for (const socket of sockets) socket.destroy();
      frozen = false;
      if (!server.listening) await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      if (server.listening) await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
