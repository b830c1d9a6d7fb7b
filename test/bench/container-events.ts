// The real node's container events, for `npm run bench:images -- --trace`: `ctr events` on the
// node's containerd gives each container's creation and its task's start in containerd's own
// clock (this machine's), so a pod's start can be split into the steps the kubelet takes one
// after another (docs/development.md, "task_image_start").
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { promisify } from "node:util";
import { z } from "zod";

const run = promisify(execFile);

/** `2026-12-03 17:45:46.123456789 +0000 UTC k8s.io /tasks/start {"container_id":"...",...}` */
const EVENT_LINE = /^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) ([+-]\d{4}) \S+ \S+ (\/\S+) (\{.*\})$/;
const eventBody = z.object({ id: z.string().optional(), container_id: z.string().optional() }).passthrough();
const containerInfo = z.object({
  ID: z.string(),
  Labels: z.record(z.string(), z.string()).default({}),
});

/** Epoch ms of ctr's timestamp (nanoseconds kept to the microsecond). */
function epochMs(stamp: string, zone: string): number {
  const [date = "", fraction = "0"] = stamp.split(".");
  const whole = Date.parse(`${date.replace(" ", "T")}${zone.slice(0, 3)}:${zone.slice(3)}`);
  return whole + Number(`0.${fraction}`) * 1000;
}

export interface ContainerTimes {
  /** containerd's /containers/create: the kubelet's CreateContainer. */
  created?: number;
  /** /tasks/start: the container's process runs. */
  started?: number;
}

export interface ContainerEvents {
  /** Each container of a pod by its name in the pod, with its times (epoch ms). */
  ofPod(pod: string): Promise<Map<string, ContainerTimes>>;
  stop(): void;
}

export async function watchContainerEvents(ctr: string, socket: string): Promise<ContainerEvents> {
  const times = new Map<string, ContainerTimes>();
  const child: ChildProcess = spawn(ctr, ["--address", socket, "--namespace", "k8s.io", "events"], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream });
  lines.on("line", (line) => {
    const match = EVENT_LINE.exec(line);
    if (!match) return;
    const [, stamp = "", zone = "", topic = "", json = ""] = match;
    const body = eventBody.safeParse(JSON.parse(json));
    if (!body.success) return;
    const at = epochMs(stamp, zone);
    if (topic === "/containers/create" && body.data.id) {
      times.set(body.data.id, { ...times.get(body.data.id), created: at });
    } else if (topic === "/tasks/start" && body.data.container_id) {
      times.set(body.data.container_id, { ...times.get(body.data.container_id), started: at });
    }
  });
  await new Promise((resolve) => setTimeout(resolve, 300)); // ctr subscribes before the first pod
  const ctrJson = async (args: string[]) =>
    (await run(ctr, ["--address", socket, "--namespace", "k8s.io", ...args], { maxBuffer: 1 << 24 })).stdout;
  return {
    async ofPod(pod) {
      const ids = (await ctrJson(["containers", "list", "-q", `labels."io.kubernetes.pod.name"==${pod}`]))
        .split("\n")
        .filter(Boolean);
      const byName = new Map<string, ContainerTimes>();
      for (const id of ids) {
        const info = containerInfo.parse(JSON.parse(await ctrJson(["containers", "info", id])));
        const name = info.Labels["io.kubernetes.container.name"];
        // The sandbox (pause) has no container name: it is the pod's start, kept as "(sandbox)".
        byName.set(name ?? "(sandbox)", times.get(info.ID) ?? {});
      }
      return byName;
    },
    stop: () => child.kill(),
  };
}
