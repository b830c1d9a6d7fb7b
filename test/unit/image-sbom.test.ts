// The image's SBOM merge (scripts/image-sbom.ts) on inputs as the Dockerfile's image-packages
// stage writes them; test/image/sbom.test.ts checks the SBOM the real build ships against the
// container's own dpkg-query.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { debianLicense, imageSbom, parseDpkgList } from "../../scripts/image-sbom.js";
import { CLI } from "../support/cli.js";

const DEP5 = "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\nUpstream-Name: x\n";

describe("a Debian package's licence from its copyright file", () => {
  it.each([
    [
      "one licence that maps to SPDX",
      "Files: *\nCopyright: 2015 A\nLicense: Expat\n",
      [{ license: { id: "MIT" } }],
    ],
    [
      "GPL-2+",
      "Files: *\nCopyright: A\nLicense: GPL-2+\n .\n text\n",
      [{ license: { id: "GPL-2.0-or-later" } }],
    ],
    [
      "an or of mapped ones",
      "Files: *\nLicense: BSD-3-clause or GPL-2\n",
      [{ expression: "BSD-3-Clause OR GPL-2.0-only" }],
    ],
    ["a licence with an exception", "Files: *\nLicense: GPL-2+ with OpenSSL exception\n", undefined],
    ["and with or together", "Files: *\nLicense: GPL-2+ or LGPL-3+ and MIT\n", undefined],
    ["an unknown short name", "Files: *\nLicense: public-domain\n", undefined],
    ["no Files: * paragraph", "Files: src/*\nLicense: MIT\n", undefined],
  ])("%s", (_, body, expected) => {
    expect(debianLicense(`${DEP5}\n${body}`)).toEqual(expected);
  });

  it("claims none from a copyright file that is not machine-readable", () => {
    expect(debianLicense("This package was debianized by someone.\n\nLicense: MIT\n")).toBeUndefined();
  });
});

describe("dpkg-query's list", () => {
  it("keeps the installed packages only, sorted by name", () => {
    expect(
      parseDpkgList("ii \tzlib1g\t1:1.2.13\tamd64\nrc \told\t1\tamd64\nii \ttini\t0.19.0-1\tamd64\n"),
    ).toEqual([
      { name: "tini", version: "0.19.0-1", arch: "amd64" },
      { name: "zlib1g", version: "1:1.2.13", arch: "amd64" },
    ]);
  });

  it("names the line it cannot read", () => {
    expect(() => parseDpkgList("ii \ttini\t0.19.0-1\n")).toThrow(
      'dpkg-packages.tsv line 1: "ii \ttini\t0.19.0-1" is not STATUS\\tNAME\\tVERSION\\tARCH',
    );
  });
});

describe("the merged SBOM", () => {
  const input = mkdtempSync(path.join(tmpdir(), "image-sbom-"));
  afterAll(() => rmSync(input, { recursive: true, force: true }));

  it("holds the bundle's components, Node, the global npm packages and the Debian packages with purls", () => {
    writeFileSync(
      path.join(input, "dpkg-packages.tsv"),
      "ii \ttini\t0.19.0-1\tamd64\nii \tzlib1g\t1:1.2.13.dfsg-1\tamd64\n",
    );
    writeFileSync(path.join(input, "node-version"), "v24.21.0\n");
    writeFileSync(path.join(input, "os-release"), 'ID=debian\nVERSION_ID="12"\n');
    mkdirSync(path.join(input, "doc", "tini"), { recursive: true });
    writeFileSync(path.join(input, "doc", "tini", "copyright"), `${DEP5}\nFiles: *\nLicense: Expat\n`);
    mkdirSync(path.join(input, "node_modules", "npm"), { recursive: true });
    writeFileSync(
      path.join(input, "node_modules", "npm", "package.json"),
      JSON.stringify({ name: "npm", version: "11.6.2", license: "Artistic-2.0" }),
    );
    const bundle = readFileSync(path.join(path.dirname(CLI), "sbom.cdx.json"), "utf8");
    const sbom = imageSbom(input, bundle) as { metadata: object; components: object[] };
    const bundled = (JSON.parse(bundle) as { components: object[] }).components;
    expect(sbom.metadata).toMatchObject({ component: { type: "container", name: "playbook-controller" } });
    expect(sbom.components).toEqual(expect.arrayContaining(bundled));
    expect(sbom.components).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ name: "node", version: "24.21.0", type: "application" }),
        expect.objectContaining({ name: "npm", version: "11.6.2", purl: "pkg:npm/npm@11.6.2" }),
        {
          type: "library",
          "bom-ref": "pkg:deb/debian/tini@0.19.0-1?arch=amd64&distro=debian-12",
          name: "tini",
          version: "0.19.0-1",
          purl: "pkg:deb/debian/tini@0.19.0-1?arch=amd64&distro=debian-12",
          licenses: [{ license: { id: "MIT" } }],
        },
        {
          type: "library",
          "bom-ref": "pkg:deb/debian/zlib1g@1:1.2.13.dfsg-1?arch=amd64&distro=debian-12",
          name: "zlib1g",
          version: "1:1.2.13.dfsg-1",
          purl: "pkg:deb/debian/zlib1g@1:1.2.13.dfsg-1?arch=amd64&distro=debian-12",
        },
      ]),
    );
    // Every bom-ref once: CycloneDX refers to components by it.
    const refs = sbom.components.map((c) => (c as { "bom-ref": string })["bom-ref"]);
    expect(new Set(refs).size).toBe(refs.length);
  });

  it("names a library linked statically into the image's programs, with its upstream version and licence", () => {
    const musl = path.join(input, "linked", "musl");
    mkdirSync(musl, { recursive: true });
    writeFileSync(path.join(musl, "version"), "1.2.3-1\n");
    writeFileSync(path.join(musl, "into"), "/usr/local/lib/playbook/agent\n");
    writeFileSync(path.join(musl, "copyright"), `${DEP5}\nFiles: *\nLicense: MIT\n`);
    const sbom = imageSbom(input, readFileSync(path.join(path.dirname(CLI), "sbom.cdx.json"), "utf8")) as {
      components: object[];
    };
    expect(sbom.components).toContainEqual({
      type: "library",
      "bom-ref": "pkg:generic/musl@1.2.3#linked",
      name: "musl",
      version: "1.2.3",
      description: "linked statically into /usr/local/lib/playbook/agent (built with Debian's musl 1.2.3-1)",
      purl: "pkg:generic/musl@1.2.3",
      licenses: [{ license: { id: "MIT" } }],
    });
    rmSync(path.join(input, "linked"), { recursive: true });
  });

  it("takes busybox-static's licence from its prose copyright file while it says GPL version 2", () => {
    writeFileSync(path.join(input, "dpkg-packages.tsv"), "ii \tbusybox-static\t1:1.35.0-4\tamd64\n");
    mkdirSync(path.join(input, "doc", "busybox-static"), { recursive: true });
    const copyright = path.join(input, "doc", "busybox-static", "copyright");
    const busybox = () =>
      (
        imageSbom(input, readFileSync(path.join(path.dirname(CLI), "sbom.cdx.json"), "utf8")) as {
          components: Array<{ name: string; licenses?: object[] }>;
        }
      ).components.find((c) => c.name === "busybox-static");
    writeFileSync(
      copyright,
      "License:\n\n   it under the terms of the GNU General Public License as published by\n" +
        "   the Free Software Foundation; version 2 dated June, 1991.\n",
    );
    expect(busybox()?.licenses).toEqual([{ license: { id: "GPL-2.0-only" } }]);
    writeFileSync(copyright, "License: see the source\n");
    expect(busybox()?.licenses).toBeUndefined();
  });

  it("refuses a node-version that is not node --version's", () => {
    writeFileSync(path.join(input, "node-version"), "24\n");
    expect(() =>
      imageSbom(input, readFileSync(path.join(path.dirname(CLI), "sbom.cdx.json"), "utf8")),
    ).toThrow('node-version: "24" is not what node --version prints');
  });
});
