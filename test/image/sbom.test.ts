// The image's SBOM (/usr/share/doc/playbook-controller/sbom.image.cdx.json, made by the build):
// what it names is what the image holds, as dpkg-query, node and the bundle's own SBOM say inside
// the container.
import type { StartedTestContainer } from "testcontainers";
import { beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { startImageContainer } from "./support.js";

const DOC = "/usr/share/doc/playbook-controller";

const Component = z.object({
  type: z.string(),
  "bom-ref": z.string().min(1),
  name: z.string().min(1),
  version: z.string().min(1),
  purl: z.string().optional(),
  licenses: z.array(z.object({}).passthrough()).optional(),
});
const Sbom = z.object({
  bomFormat: z.literal("CycloneDX"),
  specVersion: z.string(),
  metadata: z.object({ component: z.object({ type: z.string(), name: z.string(), version: z.string() }) }),
  components: z.array(Component),
});
type Component = z.infer<typeof Component>;

let container: StartedTestContainer;
let sbom: z.infer<typeof Sbom>;

async function execOk(command: string[]): Promise<string> {
  const result = await container.exec(command);
  expect(result.exitCode, `${command.join(" ")}: ${result.output}`).toBe(0);
  return result.stdout;
}

/** dpkg-query's format for one line per package: status, name, version, architecture. */
// biome-ignore lint/suspicious/noTemplateCurlyInString: dpkg-query's own field syntax, not a template
const DPKG_LINE = "-f=${db:Status-Abbrev}\t${Package}\t${Version}\t${Architecture}\n";
// biome-ignore lint/suspicious/noTemplateCurlyInString: dpkg-query's own field syntax, not a template
const DPKG_VERSION = "-f=${Version}";

const debs = (components: Component[]) => components.filter((c) => c.purl?.startsWith("pkg:deb/"));

describe("the image's SBOM", () => {
  beforeAll(async () => {
    container = await startImageContainer();
    sbom = Sbom.parse(JSON.parse(await execOk(["cat", `${DOC}/sbom.image.cdx.json`])));
  });

  it("lists every Debian package dpkg-query says is installed, with its version and arch, and nothing else", async () => {
    const installed = (await execOk(["dpkg-query", "-W", DPKG_LINE]))
      .split("\n")
      .filter((line) => line.startsWith("ii"))
      .map((line) => {
        const [, name, version, arch] = line.split("\t");
        return {
          name,
          version,
          purl: expect.stringMatching(
            new RegExp(
              `^pkg:deb/debian/${encodeURIComponent(name ?? "").replace(/[+.]/g, "\\$&")}@[^?]+\\?arch=${arch}&distro=debian-12$`,
            ),
          ),
        };
      })
      .sort((a, b) => ((a.name ?? "") < (b.name ?? "") ? -1 : 1));
    expect(installed.length).toBeGreaterThan(50);
    expect(debs(sbom.components).map(({ name, version, purl }) => ({ name, version, purl }))).toEqual(
      installed,
    );
  });

  it("names tini (the image's PID 1) and procps with dpkg's versions, and tini's licence from its copyright file", async () => {
    for (const name of ["tini", "procps"]) {
      const version = (await execOk(["dpkg-query", "-W", DPKG_VERSION, name])).trim();
      expect(debs(sbom.components).find((c) => c.name === name)).toMatchObject({ version });
    }
    expect(debs(sbom.components).find((c) => c.name === "tini")?.licenses).toEqual([
      { license: { id: "MIT" } },
    ]);
  });

  it("names every package the bundle inlines with the versions of the bundle's own SBOM", async () => {
    const bundle = Sbom.parse(JSON.parse(await execOk(["cat", `${DOC}/sbom.cdx.json`])));
    expect(bundle.components.map((c) => c.name)).toEqual(
      expect.arrayContaining(["zod", "yaml", "commander"]),
    );
    for (const c of bundle.components) {
      expect(sbom.components, `${c.name}@${c.version}`).toContainEqual(
        expect.objectContaining({ name: c.name, version: c.version, purl: c.purl }),
      );
    }
    expect(sbom.metadata.component).toMatchObject({
      type: "container",
      name: bundle.metadata.component.name,
      version: bundle.metadata.component.version,
    });
  });

  it("names musl, linked into the agent, and busybox-static, the agent's shell, with their licences", async () => {
    expect(sbom.components).toContainEqual(
      expect.objectContaining({
        name: "musl",
        purl: expect.stringMatching(/^pkg:generic\/musl@\d+\.\d+\.\d+$/),
        description: expect.stringContaining("/usr/local/lib/playbook/agent"),
        licenses: [{ license: { id: "MIT" } }],
      }),
    );
    const busybox = (await execOk(["dpkg-query", "-W", DPKG_VERSION, "busybox-static"])).trim();
    expect(debs(sbom.components).find((c) => c.name === "busybox-static")).toMatchObject({
      version: busybox,
      licenses: [{ license: { id: "GPL-2.0-only" } }],
    });
  });

  it("names the Node runtime the image runs, at node --version's version", async () => {
    const version = (await execOk(["node", "--version"])).trim().replace(/^v/, "");
    expect(sbom.components).toContainEqual(
      expect.objectContaining({ type: "application", name: "node", version }),
    );
  });
});
