// The chart sizes the controller's Node heap from the container's memory limit, as an operator
// would: the old space capped at half of what the limit leaves above Node's own 64 MiB, and a
// small young generation, so resident memory follows what the cache holds (issue 11).
import path from "node:path";
import { describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";
import { CHART_NODE_OPTIONS } from "../bench/bench-cluster.js";
import { repoRoot } from "../harness/binaries.js";
import { helm } from "./support.js";

const chart = path.join(repoRoot(), "charts", "playbook-controller");

interface Container {
  env?: { name: string; value?: string }[];
  resources?: { limits?: { memory?: string } };
}

async function controllerContainer(sets: string[]): Promise<Container> {
  const result = await helm(["template", "pbc", chart, ...sets.flatMap((set) => ["--set", set])]);
  expect(result.stderr).toBe("");
  const deployment = parseAllDocuments(result.stdout)
    .map((doc) => doc.toJS() as { kind?: string; spec?: { template: { spec: { containers: Container[] } } } })
    .find((object) => object?.kind === "Deployment");
  const container = deployment?.spec?.template.spec.containers[0];
  if (!container) throw new Error("the chart rendered no controller container");
  return container;
}

const nodeOptions = (container: Container) => container.env?.find((e) => e.name === "NODE_OPTIONS")?.value;

describe("the chart's Node heap", () => {
  it("is 96 MiB of old space and a 2 MiB semi-space within the default 256Mi limit", async () => {
    const container = await controllerContainer([]);
    expect(container.resources?.limits?.memory).toBe("256Mi");
    expect(nodeOptions(container)).toBe("--max-old-space-size=96 --max-semi-space-size=2");
    // The benchmark starts the controller as the chart's default does.
    expect(CHART_NODE_OPTIONS).toBe(nodeOptions(container));
  });

  it.each([
    ["384Mi", "--max-old-space-size=160 --max-semi-space-size=2"],
    ["1Gi", "--max-old-space-size=480 --max-semi-space-size=2"],
  ])("follows a memory limit of %s", async (limit, expected) => {
    expect(nodeOptions(await controllerContainer([`resources.limits.memory=${limit}`]))).toBe(expected);
  });

  it("is left to Node where the limit is not in Mi or Gi, or leaves no room", async () => {
    expect(nodeOptions(await controllerContainer(["resources.limits.memory=300M"]))).toBeUndefined();
    expect(nodeOptions(await controllerContainer(["resources.limits.memory=64Mi"]))).toBeUndefined();
  });
});
