// The bundle (dist/bin) inlines npm packages and ships without node_modules: the licences of those
// packages, and an SBOM of them, must ship beside it, in the npm package, and in the image
// (test/image/runtime.test.ts). The package list here is read from the source maps on its own, the
// same way test/unit/cli-bundle.test.ts reads them, not from the module under test.
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { bundledPackages } from "../../scripts/third-party-notices.js";
import { CLI } from "../support/cli.js";

const ROOT = path.join(import.meta.dirname, "../..");
const BUNDLE_DIR = path.dirname(CLI);
const notices = readFileSync(path.join(BUNDLE_DIR, "THIRD-PARTY-NOTICES.txt"), "utf8");

/** name -> package folder, for every node_modules package a source map of the bundle names. */
function packagesInSourceMaps(): Map<string, string> {
  const found = new Map<string, string>();
  for (const file of readdirSync(BUNDLE_DIR).filter((name) => name.endsWith(".js.map"))) {
    const map = JSON.parse(readFileSync(path.join(BUNDLE_DIR, file), "utf8")) as { sources: string[] };
    for (const source of map.sources) {
      const match = /^(.*[\\/]node_modules[\\/])((?:@[^\\/]+[\\/])?[^\\/]+)[\\/]/.exec(
        path.resolve(BUNDLE_DIR, source),
      );
      if (match?.[1] !== undefined && match[2] !== undefined) {
        found.set(match[2].replaceAll("\\", "/"), match[1] + match[2]);
      }
    }
  }
  return found;
}

describe("the bundle's third-party notices", () => {
  const packages = packagesInSourceMaps();

  it("finds the packages the bundle is known to inline (the source maps are read right)", () => {
    for (const name of [
      "zod",
      "commander",
      "yaml",
      "@kubernetes/client-node",
      "undici",
      "pino",
      "prom-client",
    ]) {
      expect([...packages.keys()]).toContain(name);
    }
  });

  it("lists every package in the bundle's source maps with its version, licence and licence text", () => {
    for (const [name, dir] of packages) {
      const manifest = JSON.parse(readFileSync(path.join(dir, "package.json"), "utf8")) as {
        version: string;
        license: string;
      };
      expect(notices, name).toContain(`\n  ${name}@${manifest.version} (${manifest.license})\n`);
      // The text is in the package's own section: from its heading to the next one.
      const start = notices.indexOf(`\n${name}@${manifest.version}\nLicense: `);
      expect(start, name).toBeGreaterThan(0);
      const end = notices.indexOf(`\n${"=".repeat(78)}\n`, start);
      const section = notices.slice(start, end < 0 ? undefined : end);
      // A monorepo's package published without the repository's licence file (a few of
      // @aws-sdk's) carries the file of a sibling from the same repository, under the same id.
      const sibling = /From: (\S+) of (\S+) \(the same repository\)/.exec(section);
      const licenseDir = sibling ? packages.get(sibling[2] ?? "") : dir;
      expect(licenseDir, `${name}'s licence from ${sibling?.[2]}`).toBeDefined();
      const licenseFile = readdirSync(licenseDir ?? "").find((file) => /^licen[cs]e/i.test(file));
      expect(licenseFile, `${name} has a licence file`).toBeDefined();
      const text = readFileSync(path.join(licenseDir ?? "", licenseFile ?? ""), "utf8").trim();
      expect(text.length, name).toBeGreaterThan(100);
      expect(section, name).toContain(text);
    }
  });

  it("writes a CycloneDX SBOM with the same packages, each with its purl and licence", () => {
    const sbom = JSON.parse(readFileSync(path.join(BUNDLE_DIR, "sbom.cdx.json"), "utf8")) as {
      bomFormat: string;
      specVersion: string;
      metadata: { component: { name: string; version: string; purl: string } };
      components: { type: string; name: string; version: string; purl: string; licenses: unknown[] }[];
    };
    const { version } = JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")) as {
      version: string;
    };
    expect(sbom).toMatchObject({ bomFormat: "CycloneDX", specVersion: "1.5" });
    expect(sbom.metadata.component).toMatchObject({
      name: "playbook-controller",
      version,
      purl: `pkg:npm/playbook-controller@${version}`,
    });
    expect(sbom.components.map((c) => c.name).sort()).toEqual([...packages.keys()].sort());
    for (const component of sbom.components) {
      const manifest = JSON.parse(
        readFileSync(path.join(packages.get(component.name) ?? "", "package.json"), "utf8"),
      ) as {
        version: string;
        license: string;
      };
      expect(component).toEqual({
        type: "library",
        "bom-ref": component.purl,
        name: component.name,
        version: manifest.version,
        purl: `pkg:npm/${component.name.replace("@", "%40")}@${manifest.version}`,
        licenses: [{ license: { id: manifest.license } }],
      });
    }
    expect(sbom.components.find((c) => c.name === "@kubernetes/client-node")?.purl).toMatch(
      /^pkg:npm\/%40kubernetes\/client-node@\d/,
    );
  });

  it("is in the npm package with the LICENSE and the SBOM", () => {
    const [pack] = JSON.parse(
      execFileSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], {
        cwd: ROOT,
        encoding: "utf8",
      }),
    ) as { files: { path: string }[] }[];
    const files = (pack?.files ?? []).map((file) => file.path);
    expect(files).toEqual(
      expect.arrayContaining([
        "LICENSE",
        "dist/bin/THIRD-PARTY-NOTICES.txt",
        "dist/bin/sbom.cdx.json",
        "dist/bin/playbook.js",
      ]),
    );
  });

  it("has the Apache-2.0 text as the project's LICENSE (the terms as client-node ships them)", () => {
    const terms = (text: string) =>
      text
        .slice(text.indexOf("TERMS AND CONDITIONS"), text.indexOf("END OF TERMS AND CONDITIONS"))
        .replace(/\s+/g, " ");
    const ours = readFileSync(path.join(ROOT, "LICENSE"), "utf8");
    expect(ours).toMatch(/^\s*Apache License\s+Version 2\.0, January 2004/);
    expect(terms(ours).length).toBeGreaterThan(9000);
    expect(terms(ours)).toBe(
      terms(readFileSync(path.join(ROOT, "node_modules/@kubernetes/client-node/LICENSE"), "utf8")),
    );
  });
});

describe("the build's licence check", () => {
  const scratch = mkdtempSync(path.join(tmpdir(), "notices-"));
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));

  /** A bundle dir whose one source map names a module of a package made here. */
  function bundleWith(name: string, manifest: object, files: Record<string, string>): string {
    const dir = path.join(scratch, name);
    const pkg = path.join(dir, "node_modules", name);
    mkdirSync(pkg, { recursive: true });
    writeFileSync(path.join(pkg, "package.json"), JSON.stringify({ name, version: "1.0.0", ...manifest }));
    for (const [file, text] of Object.entries(files)) writeFileSync(path.join(pkg, file), text);
    writeFileSync(path.join(pkg, "index.js"), "");
    const bin = path.join(dir, "bin");
    mkdirSync(bin);
    writeFileSync(
      path.join(bin, "x.js.map"),
      JSON.stringify({ sources: [`../node_modules/${name}/index.js`] }),
    );
    return bin;
  }

  it("fails on a bundled package whose licence is not a permissive one, naming it and the licence", () => {
    const bin = bundleWith("copyleft", { license: "GPL-3.0-only" }, { LICENSE: "GPL" });
    expect(() => bundledPackages(bin)).toThrow(
      /copyleft@1\.0\.0: license "GPL-3\.0-only" is not one of MIT, ISC/,
    );
  });

  it("fails on a bundled package with no licence file, naming it", () => {
    const bin = bundleWith("unlicensed", { license: "MIT" }, {});
    expect(() => bundledPackages(bin)).toThrow(/unlicensed@1\.0\.0: no LICENSE file/);
  });

  it("accepts a permissive one, with its text and its NOTICE", () => {
    const bin = bundleWith(
      "fine",
      { license: "(MIT OR GPL-2.0)" },
      { "LICENSE.md": "\n  The text\n", NOTICE: "Notice" },
    );
    expect(bundledPackages(bin)).toMatchObject([
      {
        name: "fine",
        version: "1.0.0",
        licenseFile: "LICENSE.md",
        licenseText: "  The text",
        noticeText: "Notice",
      },
    ]);
  });
});
