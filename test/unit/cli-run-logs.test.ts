// The log API's lines with `timestamps=true`, as `submit --watch` and `logs` read them: the time
// the kubelet took each line, and keys that sort as the times do whatever their precision, so a
// stream opened again from the newest time skips exactly what was already shown, and one stream
// shows every line in the order the log holds them.
import http from "node:http";
import type { AddressInfo } from "node:net";
import { KubeConfig } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import type { Cluster } from "../../src/cli/cluster/connection.js";
import { isProgressRecord, readPodLog, splitTimestamp } from "../../src/cli/cluster/run-logs.js";
import { ApiClient } from "../../src/runtime/api-client.js";

describe("log lines with their timestamps", () => {
  it("splits the kubelet's timestamp from the line, spaces in the line kept", () => {
    const { line, stamp } = splitTimestamp("2026-12-01T23:37:39.123456789Z [build] make  all");
    expect(line).toEqual({ text: "[build] make  all", at: Date.parse("2026-12-01T23:37:39.123Z") });
    expect(stamp).toBe("2026-12-01T23:37:39.123456789Z");
  });

  it("orders times of any precision (RFC 3339 drops trailing zeros)", () => {
    const stamps = [
      "2026-12-01T23:37:39Z",
      "2026-12-01T23:37:39.0000001Z",
      "2026-12-01T23:37:39.1Z",
      "2026-12-01T23:37:39.12Z",
      "2026-12-01T23:37:39.123456789Z",
      "2026-12-01T23:37:40.5Z",
    ];
    const keys = stamps.map((stamp) => splitTimestamp(`${stamp} x`).key);
    expect([...keys].sort()).toEqual(keys);
    expect(new Set(keys).size).toBe(keys.length);
  });

  it("keeps a line without a timestamp whole", () => {
    expect(splitTimestamp("no time here")).toMatchObject({ key: "", line: { text: "no time here" } });
  });
});

/**
 * The log API as the kubelet serves it through the API server, on a local HTTP server: the first
 * stream gives `first` and breaks while the runner still runs; the next, opened from `sinceTime`,
 * gives what the log holds from that time on, and the runner has ended.
 */
async function logServer(log: string[], breakAfter: number) {
  const opens: (string | undefined)[] = [];
  const server = http.createServer((request, response) => {
    const url = new URL(request.url ?? "/", "http://localhost");
    if (url.pathname.endsWith("/log")) {
      const since = url.searchParams.get("sinceTime") ?? undefined;
      opens.push(since);
      response.writeHead(200, { "content-type": "text/plain" });
      if (since === undefined) {
        response.end(`${log.slice(0, breakAfter).join("\n")}\n`);
      } else {
        const from = splitTimestamp(`${since} x`).key;
        response.end(`${log.filter((line) => splitTimestamp(line).key >= from).join("\n")}\n`);
      }
      return;
    }
    response.writeHead(200, { "content-type": "application/json" });
    const state = opens.length > 1 ? { terminated: { exitCode: 0 } } : { running: {} };
    response.end(JSON.stringify({ status: { containerStatuses: [{ name: "runner", state }] } }));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromOptions({
    clusters: [{ name: "c", server: `http://127.0.0.1:${port}` }],
    users: [{ name: "u" }],
    contexts: [{ name: "x", cluster: "c", user: "u" }],
    currentContext: "x",
  });
  const cluster: Cluster = {
    kubeConfig,
    api: new ApiClient(kubeConfig),
    namespace: "ns",
    context: "x",
    server: `http://127.0.0.1:${port}`,
  };
  return { cluster, opens, close: () => new Promise((resolve) => server.close(resolve)) };
}

async function readAll(cluster: Cluster): Promise<string[]> {
  const lines: string[] = [];
  await readPodLog(cluster, "p", {
    follow: true,
    signal: new AbortController().signal,
    onLine: (line) => lines.push(line.text),
  });
  return lines;
}

describe("reading a runner's log", () => {
  // containerd stamps stdout's and stderr's lines in two goroutines: a stderr line can follow a
  // later-stamped stdout line in the log. The watch once lost "task test Succeeded" this way.
  const log = [
    "2026-12-02T02:20:01.000000100Z playbook: task test started",
    "2026-12-02T02:20:01.000000300Z [test] ok",
    "2026-12-02T02:20:01.000000200Z playbook: task test Succeeded in 5ms",
    "2026-12-02T02:20:01.000000400Z playbook: run Succeeded: all 1 tasks succeeded",
  ];

  it("shows every line of one stream, even those stamped before the line ahead of them", async () => {
    const server = await logServer(log, log.length);
    try {
      // The stream is whole, but the pod still runs: the second open (sinceTime) gives nothing new.
      expect(await readAll(server.cluster)).toEqual(log.map((line) => line.slice(31)));
    } finally {
      await server.close();
    }
  });

  it("opened again from the newest time, skips exactly what it showed", async () => {
    const same = [
      "2026-12-02T02:20:01.000000100Z playbook: task a started",
      "2026-12-02T02:20:01.000000200Z [a] one",
      "2026-12-02T02:20:01.000000200Z [a] two",
      "2026-12-02T02:20:01.000000200Z [a] three",
      "2026-12-02T02:20:01.000000300Z playbook: task a Succeeded in 1ms",
    ];
    const server = await logServer(same, 3);
    try {
      expect(await readAll(server.cluster)).toEqual(same.map((line) => line.slice(31)));
      expect(server.opens).toEqual([undefined, "2026-12-02T02:20:01.000000200Z"]);
    } finally {
      await server.close();
    }
  });
});

describe("the runner's progress records", () => {
  // What `playbook logs` and `submit --watch` read: the records are the controller's, and a task's
  // line that carries the marker after its prefix is the task's output, shown as it is.
  const record = `playbook.dev/progress {"v":1,"start":"2026-12-02T02:20:00.000Z","seq":1,"tasks":[{"p":"Running","s":5}]}`;
  const log = [
    "2026-12-02T02:20:01.000000100Z playbook: task a started",
    `2026-12-02T02:20:01.000000150Z ${record}`,
    "2026-12-02T02:20:01.000000200Z [a] playbook.dev/progress {forged}",
    "2026-12-02T02:20:01.000000250Z playbook.dev/progress not even JSON",
    "2026-12-02T02:20:01.000000300Z playbook: task a Succeeded in 1ms",
  ];

  it("never gives a record line to `logs` or `submit --watch`, and keeps task lines that carry the marker", async () => {
    const server = await logServer(log, log.length);
    try {
      expect(await readAll(server.cluster)).toEqual([
        "playbook: task a started",
        "[a] playbook.dev/progress {forged}",
        "playbook: task a Succeeded in 1ms",
      ]);
    } finally {
      await server.close();
    }
  });

  it("reopened from the newest time, still skips what it showed and hides the records", async () => {
    const server = await logServer(log, 2);
    try {
      const lines = await readAll(server.cluster);
      expect(lines).toEqual([
        "playbook: task a started",
        "[a] playbook.dev/progress {forged}",
        "playbook: task a Succeeded in 1ms",
      ]);
    } finally {
      await server.close();
    }
  });

  it("knows a record by its marker at the line's start only", () => {
    expect(isProgressRecord(record)).toBe(true);
    expect(isProgressRecord(`[a] ${record}`)).toBe(false);
    expect(isProgressRecord(` ${record}`)).toBe(false);
  });
});
