// A small HTTP CONNECT proxy on loopback, as a corporate proxy in front of a cluster is: it opens
// a tunnel to whatever host:port a client asks for, sending every tunnel to one upstream (so a
// name that resolves nowhere reaches the API server only through it), and records each tunnel:
// what was asked for, and which side closed it first.
import http from "node:http";
import net from "node:net";

export interface Tunnel {
  target: string;
  openedAt: number;
  /** Who ended the tunnel first, once it ended. */
  closedBy?: "client" | "upstream";
  closedAt?: number;
}

export interface ConnectProxy {
  url: string;
  tunnels: Tunnel[];
  close(): Promise<void>;
}

export async function startConnectProxy(upstream: { host: string; port: number }): Promise<ConnectProxy> {
  const tunnels: Tunnel[] = [];
  const sockets = new Set<net.Socket>();
  const server = http.createServer((_request, response) => {
    response.writeHead(405).end("CONNECT only\n");
  });
  server.on("connect", (request: http.IncomingMessage, client: net.Socket, head: Buffer) => {
    const tunnel: Tunnel = { target: request.url ?? "", openedAt: performance.now() };
    tunnels.push(tunnel);
    const end = (side: "client" | "upstream") => {
      if (tunnel.closedBy) return;
      tunnel.closedBy = side;
      tunnel.closedAt = performance.now();
    };
    const api = net.connect(upstream.port, upstream.host, () => {
      client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
      if (head.length > 0) api.write(head);
      client.pipe(api);
      api.pipe(client);
    });
    for (const socket of [client, api]) {
      sockets.add(socket);
      socket.on("close", () => sockets.delete(socket));
    }
    client.on("end", () => end("client"));
    client.on("close", () => end("client"));
    api.on("end", () => end("upstream"));
    api.on("close", () => end("upstream"));
    client.on("error", () => api.destroy());
    api.on("error", () => client.destroy());
    client.on("close", () => api.destroy());
    api.on("close", () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    tunnels,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
