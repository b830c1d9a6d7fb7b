// The real node's traffic stays inside its own network namespace: the kubelet's HTTP probes reach
// a pod over the node's bridge, a scrape through `kubectl port-forward` or the API server's
// pods/proxy reaches it (through the kubelet, or the node's relay for the API server), Services work for pods (the `kubernetes` Service, as the chart's
// controller uses it in a pod, and a ClusterIP Service in front of another pod), and meanwhile no
// packet for the pod subnet, the Service range or the node's API address leaves this machine's
// network namespace: an nftables counter on this machine's output path says so.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { readFileSync, readlinkSync } from "node:fs";
import path from "node:path";
import type { V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { z } from "zod";
import { kubectl } from "../controller/support.js";
import {
  clusterClients,
  createTestNamespace,
  deleteTestNamespace,
  waitForPod,
} from "../harness/cluster-test.js";
import { waitFor } from "../harness/processes.js";
import { BUSYBOX_IMAGE } from "../harness/real-node/images.js";
import { NODE_API_ADDRESS, POD_BRIDGE, POD_SUBNET, SERVICE_SUBNET } from "../harness/real-node/real-node.js";

const { core } = clusterClients();

// Counted by conntrack's original destination, on every interface but loopback: a connection
// dialed here to a pod, a Service or the node's API address, wherever the routing table sends
// it (the default route, or podman's bridge, which uses 10.88.0.0/16 too). Podman's own
// port-mapped connections to its containers are dialed to 127.0.0.1 and DNATed, so their
// original destination is not counted.
const TABLE = `playbook_rn_egress_${process.pid}`;
const COUNTED = { pods: POD_SUBNET, services: SERVICE_SUBNET, nodeApi: `${NODE_API_ADDRESS}/32` };

function nft(args: string[], input?: string): string {
  return execFileSync("nft", args, { encoding: "utf8", ...(input === undefined ? {} : { input }) });
}

function egressCounters(): Record<string, number> {
  const listed = z
    .object({ nftables: z.array(z.record(z.string(), z.unknown())) })
    .parse(JSON.parse(nft(["-j", "list", "counters", "table", "inet", TABLE])));
  const counters: Record<string, number> = {};
  for (const entry of listed.nftables) {
    const counter = z.object({ name: z.string(), packets: z.number() }).safeParse(entry.counter);
    if (counter.success) counters[counter.data.name] = counter.data.packets;
  }
  return counters;
}

const stateDir = () => path.dirname(inject("kubeconfig"));
const netNamespace = (pid: number | "self") => readlinkSync(`/proc/${pid}/ns/net`);

/** The real node's recorded processes, by name. */
function nodeProcesses(): Map<string, number> {
  const state = z
    .object({ processes: z.array(z.object({ name: z.string(), pid: z.number() })) })
    .parse(JSON.parse(readFileSync(path.join(stateDir(), "state.json"), "utf8")));
  return new Map(state.processes.map((p) => [p.name, p.pid]));
}

function inNodeNamespace(command: string[]): string {
  const holder = nodeProcesses().get("real-node-namespaces");
  if (holder === undefined) throw new Error("no real-node-namespaces process recorded in state.json");
  return execFileSync("nsenter", [`--net=/proc/${holder}/ns/net`, "--", ...command], { encoding: "utf8" });
}

let namespace: string;
const children: ChildProcess[] = [];

beforeAll(async () => {
  nft(
    ["-f", "-"],
    `table inet ${TABLE} {
  ${Object.keys(COUNTED)
    .map((name) => `counter ${name} {}`)
    .join("\n  ")}
  chain output {
    type filter hook output priority 0; policy accept;
    oifname "lo" return
    ${Object.entries(COUNTED)
      .map(([name, subnet]) => `ct original ip daddr ${subnet} counter name ${name}`)
      .join("\n    ")}
  }
}
`,
  );
  namespace = await createTestNamespace(core, "rn-network");
});
afterAll(async () => {
  for (const child of children) child.kill();
  await deleteTestNamespace(core, namespace);
  try {
    nft(["delete", "table", "inet", TABLE]);
  } catch {
    // Never created.
  }
});

function busybox(name: string, script: string, extra: Record<string, unknown> = {}, labels = {}): V1Pod {
  return {
    metadata: { name, labels },
    spec: {
      restartPolicy: "Never",
      terminationGracePeriodSeconds: 0,
      containers: [
        {
          name: "main",
          image: BUSYBOX_IMAGE,
          imagePullPolicy: "Never",
          command: ["sh", "-c", script],
          ...extra,
        },
      ],
    },
  };
}

const ended = (p: V1Pod) => p.status?.phase === "Succeeded" || p.status?.phase === "Failed";
const isReady = (p: V1Pod) =>
  p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") ?? false;

async function logs(name: string): Promise<string> {
  return (await kubectl(["-n", namespace, "logs", name])).stdout;
}

/** `kubectl port-forward`: the local port it listens on (127.0.0.1), once it says so. */
async function portForward(target: string, remotePort: number): Promise<number> {
  const child = spawn(
    path.join(inject("binDir"), "kubectl"),
    ["-n", namespace, "port-forward", "--address=127.0.0.1", target, `:${remotePort}`],
    { env: { ...process.env, KUBECONFIG: inject("kubeconfig") }, stdio: ["ignore", "pipe", "pipe"] },
  );
  children.push(child);
  let output = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  child.stderr?.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  return waitFor(
    `kubectl port-forward ${target}`,
    async () => {
      const port = /Forwarding from 127\.0\.0\.1:(\d+)/.exec(output)?.[1];
      return port ? Number(port) : undefined;
    },
    {
      timeoutMs: 30_000,
      abortIf: () => (child.exitCode !== null ? `port-forward exited: ${output}` : undefined),
    },
  );
}

describe("the real node's network", () => {
  let webIP = "";

  it("runs kubelet, containerd and kube-proxy in the node's network namespace, which has no route out", () => {
    const processes = nodeProcesses();
    const host = netNamespace("self");
    const node = netNamespace(processes.get("real-node-namespaces") ?? 0);
    expect(node).not.toBe(host);
    for (const name of ["kubelet", "containerd", "kube-proxy", "real-node-relay-node"])
      expect({ name, namespace: netNamespace(processes.get(name) ?? 0) }).toEqual({ name, namespace: node });
    // The relay that serves the kubelet's port to the API server is the only part on this side.
    expect(netNamespace(processes.get("real-node-relay-host") ?? 0)).toBe(host);
    const routes = inNodeNamespace(["ip", "-4", "route", "show", "table", "all"]);
    expect(routes).not.toMatch(/^default/m);
    // Its devices: loopback, the pods' bridge and their veths; nothing that leads out.
    const links = inNodeNamespace(["ip", "-o", "link", "show"])
      .split("\n")
      .map((line) => line.split(":")[1]?.trim().split("@")[0] ?? "")
      .filter((name) => name !== "");
    expect(links).toContain("lo");
    expect(links.filter((name) => name !== "lo" && name !== POD_BRIDGE && !name.startsWith("veth"))).toEqual(
      [],
    );
  });

  it("probes a pod's HTTP endpoints from the kubelet, over the node's bridge, until it is Ready", async () => {
    await core.createNamespacedPod({
      namespace,
      body: busybox(
        "web",
        "mkdir -p /www && echo ok > /www/healthz && printf 'web_up 1\\n' > /www/metrics && exec busybox httpd -f -vv -p 8080 -h /www",
        {
          ports: [{ name: "http", containerPort: 8080 }],
          readinessProbe: {
            httpGet: { path: "/healthz", port: 8080 },
            periodSeconds: 1,
            failureThreshold: 3,
          },
          livenessProbe: { httpGet: { path: "/healthz", port: 8080 }, periodSeconds: 2, failureThreshold: 3 },
        },
        { app: "web" },
      ),
    });
    const ready = await waitForPod(core, namespace, "web", "to be Ready", isReady, 90_000);
    webIP = ready.status?.podIP ?? "";
    expect(webIP).toMatch(/^10\.88\./);
    expect(ready.status?.containerStatuses?.[0]?.restartCount).toBe(0);
    // busybox httpd -vv logs each request's client: the kubelet, from the bridge's address.
    const probed = /^\[::ffff:10\.88\.0\.1\]:\d+: url:\/healthz$/m;
    await waitFor(
      "the web pod's log to show the kubelet's probes",
      async () => (probed.test(await logs("web")) ? true : undefined),
      { timeoutMs: 10_000 },
    ).catch(() => {});
    expect(await logs("web")).toMatch(probed);
  });

  it("serves the pod's metrics to this machine through kubectl port-forward (API server, kubelet, containerd)", async () => {
    const port = await portForward("pod/web", 8080);
    const response = await fetch(`http://127.0.0.1:${port}/metrics`);
    expect(response.status).toBe(200);
    expect(await response.text()).toBe("web_up 1\n");
  });

  it("lets a pod reach another pod through a ClusterIP Service", async () => {
    const service = await core.createNamespacedService({
      namespace,
      body: {
        metadata: { name: "web" },
        spec: { selector: { app: "web" }, ports: [{ port: 80, targetPort: 8080 }] },
      },
    });
    const clusterIP = service.spec?.clusterIP ?? "";
    expect(clusterIP).toMatch(/^10\.0\.0\./);
    // kube-proxy programs the Service once its EndpointSlice names the Ready pod.
    await core.createNamespacedPod({
      namespace,
      body: busybox(
        "client",
        // busybox nc, not wget: Debian's static wget crashed (SIGSEGV) on every try here.
        `i=0; while test $i -lt 30; do out=$(printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' | busybox nc -w 2 ${clusterIP} 80); case "$out" in *web_up*) echo "$out"; exit 0;; esac; i=$((i + 1)); sleep 1; done; exit 1`,
      ),
    });
    const done = await waitForPod(core, namespace, "client", "to end", ended, 90_000);
    expect({ phase: done.status?.phase, logs: await logs("client") }).toEqual({
      phase: "Succeeded",
      logs: expect.stringMatching(/^HTTP\/1\.[01] 200 OK\r?\n[\s\S]*\r?\n\r?\nweb_up 1\n$/),
    });
  });

  it("proxies to the pod and its Service through the API server, which dials them from the node's namespace", async () => {
    // The `cluster` egress selector sends the API server's connection through the node's relay.
    const { stdout: viaPod } = await kubectl([
      "get",
      "--raw",
      `/api/v1/namespaces/${namespace}/pods/web:8080/proxy/metrics`,
    ]);
    expect(viaPod).toBe("web_up 1\n");
    const { stdout: viaService } = await kubectl([
      "get",
      "--raw",
      `/api/v1/namespaces/${namespace}/services/web:80/proxy/metrics`,
    ]);
    expect(viaService).toBe("web_up 1\n");
  });

  it("lets a pod reach the API server through the kubernetes Service (KUBERNETES_SERVICE_HOST), as in-cluster clients do", async () => {
    const endpoints = await core.readNamespacedEndpoints({ namespace: "default", name: "kubernetes" });
    expect(endpoints.subsets?.[0]?.addresses?.map((a) => a.ip)).toEqual([NODE_API_ADDRESS]);
    // Debian's busybox has no TLS client that the API server's handshake accepts (its wget runs
    // `openssl s_client`; its ssl_client lacks the API server's ECDSA suites), so the pod sends
    // plain HTTP: Go's TLS server answers that with its own 400, which only the API server here
    // would send on this connection.
    await core.createNamespacedPod({
      namespace,
      body: busybox(
        "in-cluster",
        [
          'echo "service $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"',
          'printf \'GET /version HTTP/1.0\\r\\n\\r\\n\' | busybox nc -w 5 "$KUBERNETES_SERVICE_HOST" "$KUBERNETES_SERVICE_PORT"',
        ].join("\n"),
      ),
    });
    const done = await waitForPod(core, namespace, "in-cluster", "to end", ended, 90_000);
    const output = (await logs("in-cluster")).replaceAll("\r", "");
    expect({ phase: done.status?.phase, output }).toEqual({
      phase: "Succeeded",
      output:
        "service 10.0.0.1:443\nHTTP/1.0 400 Bad Request\n\nClient sent an HTTP request to an HTTPS server.\n",
    });
  });

  it("lets a TLS client in a pod (Node, in the project's image) verify the API server at 10.0.0.1 and read /version with its token", async () => {
    // What @kubernetes/client-node's in-cluster configuration does: KUBERNETES_SERVICE_HOST and
    // _PORT, the service account's CA and token. The API server's certificate names 10.0.0.1.
    const script = [
      "const fs = require('node:fs'), https = require('node:https');",
      "const dir = '/var/run/secrets/kubernetes.io/serviceaccount/';",
      "https.get({ host: process.env.KUBERNETES_SERVICE_HOST, port: process.env.KUBERNETES_SERVICE_PORT,",
      "  path: '/version', ca: fs.readFileSync(dir + 'ca.crt'),",
      "  headers: { authorization: 'Bearer ' + fs.readFileSync(dir + 'token', 'utf8') } }, (res) => {",
      "  let body = ''; res.on('data', (c) => { body += c; });",
      "  res.on('end', () => console.log(res.statusCode, JSON.parse(body).gitVersion));",
      "}).on('error', (e) => { console.error(e.message); process.exit(1); });",
    ].join("\n");
    await core.createNamespacedPod({
      namespace,
      body: {
        metadata: { name: "tls-client" },
        spec: {
          restartPolicy: "Never",
          containers: [
            {
              name: "main",
              image: inject("runnerImage"),
              imagePullPolicy: "IfNotPresent",
              command: ["node", "-e", script],
            },
          ],
        },
      },
    });
    const done = await waitForPod(core, namespace, "tls-client", "to end", ended, 90_000);
    expect({ phase: done.status?.phase, output: await logs("tls-client") }).toEqual({
      phase: "Succeeded",
      output: expect.stringMatching(/^200 v1\.\d+\.\d+\n$/),
    });
  });

  it("sent no packet for a pod, a Service or the node's API address out of this machine's network namespace", () => {
    expect(egressCounters()).toEqual({ pods: 0, services: 0, nodeApi: 0 });
  });
});
