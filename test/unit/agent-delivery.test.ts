import { describe, expect, it } from "vitest";
import { chooseAgentDelivery, runtimeProblem } from "../../src/controller/pods/agent-delivery.js";

const nodes = (...runtimes: string[]) => runtimes.map((runtime, i) => ({ name: `node-${i + 1}`, runtime }));

describe("how task containers get the agent (--agent-delivery)", () => {
  it.each([
    ["containerd://2.1.0", undefined],
    ["containerd://2.4.2", undefined],
    ["cri-o://1.31.2", undefined],
    ["containerd://2.0.5", "runs containerd://2.0.5 (image volumes need containerd 2.1+ or CRI-O 1.31+)"],
    [
      "containerd://1.7.24-1",
      "runs containerd://1.7.24-1 (image volumes need containerd 2.1+ or CRI-O 1.31+)",
    ],
    ["cri-o://1.30.4", "runs cri-o://1.30.4 (image volumes need containerd 2.1+ or CRI-O 1.31+)"],
    ["docker://28.2.2", "runs docker://28.2.2 (image volumes need containerd 2.1+ or CRI-O 1.31+)"],
    ["", "runs an unreported runtime (image volumes need containerd 2.1+ or CRI-O 1.31+)"],
  ])("takes %j as %j", (runtime, problem) => {
    expect(runtimeProblem(runtime)).toBe(problem);
  });

  it("auto: image volumes when the API server is 1.35+ and every node's runtime mounts them", () => {
    expect(
      chooseAgentDelivery("auto", {
        serverVersion: "v1.36.5",
        nodes: nodes("containerd://2.4.2", "cri-o://1.31.0"),
      }),
    ).toEqual({
      delivery: "image-volume",
      why: "auto: the API server is v1.36.5 and every node's runtime mounts image volumes (containerd://2.4.2, cri-o://1.31.0)",
    });
  });

  it.each([
    [
      "an older API server",
      { serverVersion: "v1.34.3", nodes: nodes("containerd://2.4.2") },
      "auto: the API server is v1.34.3, image volumes need Kubernetes 1.35+",
    ],
    [
      "an API server not read",
      { serverVersion: undefined, nodes: nodes("containerd://2.4.2") },
      "auto: the API server is of an unknown version, image volumes need Kubernetes 1.35+",
    ],
    [
      "no node yet",
      { serverVersion: "v1.36.5", nodes: [] },
      "auto: no node has reported its container runtime yet",
    ],
    [
      "one node of an older runtime among new ones",
      { serverVersion: "v1.36.5", nodes: nodes("containerd://2.4.2", "containerd://1.6.20") },
      "auto: node node-2 runs containerd://1.6.20 (image volumes need containerd 2.1+ or CRI-O 1.31+)",
    ],
  ])("auto: postStart with %s, saying why", (_, cluster, why) => {
    expect(chooseAgentDelivery("auto", cluster)).toEqual({ delivery: "post-start", why });
  });

  it("a fixed setting is taken whatever the cluster", () => {
    const old = { serverVersion: "v1.30.0", nodes: nodes("containerd://1.6.20") };
    expect(chooseAgentDelivery("image-volume", old)).toEqual({
      delivery: "image-volume",
      why: "--agent-delivery image-volume",
    });
    expect(
      chooseAgentDelivery("post-start", { serverVersion: "v1.36.5", nodes: nodes("containerd://2.4.2") }),
    ).toEqual({ delivery: "post-start", why: "--agent-delivery post-start" });
  });
});
