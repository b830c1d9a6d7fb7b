// PLAYBOOK_NO_INSTALL: the one variable that declines every Debian install (npm test's global
// setups, cluster:up, image:build, image:base, the real node), CLUSTER_NO_INSTALL its deprecated
// alias; and what is said before installing and when declining.
import { describe, expect, it } from "vitest";
import {
  aptInstalledSize,
  aptInstallLine,
  aptSimulatedInstalls,
  ensurePrerequisites,
  installChoice,
  installNotice,
  MissingPrerequisiteError,
  type Prerequisite,
} from "../harness/prerequisites.js";

describe("PLAYBOOK_NO_INSTALL", () => {
  it.each([
    [{}, { declined: false }],
    [{ PLAYBOOK_NO_INSTALL: "1" }, { declined: true, by: "PLAYBOOK_NO_INSTALL" }],
    [{ PLAYBOOK_NO_INSTALL: "yes" }, { declined: true, by: "PLAYBOOK_NO_INSTALL" }],
    [{ PLAYBOOK_NO_INSTALL: "0" }, { declined: false, by: "PLAYBOOK_NO_INSTALL" }],
    [{ PLAYBOOK_NO_INSTALL: "false" }, { declined: false, by: "PLAYBOOK_NO_INSTALL" }],
    [{ PLAYBOOK_NO_INSTALL: "" }, { declined: false }],
    // The new variable wins over the deprecated one whenever it is set.
    [
      { PLAYBOOK_NO_INSTALL: "0", CLUSTER_NO_INSTALL: "1" },
      { declined: false, by: "PLAYBOOK_NO_INSTALL" },
    ],
    [
      { PLAYBOOK_NO_INSTALL: "1", CLUSTER_NO_INSTALL: "0" },
      { declined: true, by: "PLAYBOOK_NO_INSTALL" },
    ],
  ])("%o gives %o", (env, expected) => {
    expect(installChoice(env)).toEqual(expected);
  });

  it("reads CLUSTER_NO_INSTALL only as a deprecated alias, and says so", () => {
    const deprecation = "CLUSTER_NO_INSTALL is deprecated: use PLAYBOOK_NO_INSTALL, which every path reads";
    expect(installChoice({ CLUSTER_NO_INSTALL: "1" })).toEqual({
      declined: true,
      by: "CLUSTER_NO_INSTALL",
      deprecation,
    });
    expect(installChoice({ CLUSTER_NO_INSTALL: "0" })).toEqual({
      declined: false,
      by: "CLUSTER_NO_INSTALL",
      deprecation,
    });
  });
});

describe("what is said about installing", () => {
  it("the notice names the packages, why, the size and how to decline", () => {
    expect(installNotice(["podman", "runc"], "the image tests build the image", "61.2 MB")).toBe(
      "Installing the Debian packages podman, runc as root with apt-get (61.2 MB on disk): the image tests build the image. " +
        "PLAYBOOK_NO_INSTALL=1 declines and prints the command instead",
    );
    expect(installNotice(["tini"], "pods need a reaper", undefined)).toBe(
      "Installing the Debian packages tini as root with apt-get: pods need a reaper. PLAYBOOK_NO_INSTALL=1 declines and prints the command instead",
    );
  });

  it("the size is what apt's simulation would install, summed from apt-cache, nothing installed", () => {
    const simulation =
      "NOTE: This is only a simulation!\nInst libtext-charwidth-perl (0.04-11 Debian:12.12/stable [amd64])\n" +
      "Inst cowsay (3.03+dfsg2-8 Debian:12.12/stable [all])\nConf cowsay (3.03+dfsg2-8 Debian:12.12/stable [all])\n";
    expect(aptSimulatedInstalls(simulation)).toEqual(["libtext-charwidth-perl", "cowsay"]);
    expect(
      aptInstalledSize("Package: a\nInstalled-Size: 61234\n\nPackage: b\nInstalled-Size: 270766\n"),
    ).toBe("332 MB");
    expect(aptInstalledSize("Package: a\nInstalled-Size: 1234\n")).toBe("1.2 MB");
    expect(aptInstalledSize("E: No packages found")).toBeUndefined();
  });

  it("the command to run is one apt-get line, with sudo when not root", () => {
    expect(aptInstallLine(["podman", "runc", "runc"], true)).toBe("apt-get install podman runc");
    expect(aptInstallLine(["tini"], false)).toBe("sudo apt-get install tini");
  });

  it("declined, it installs nothing and fails with the line to run", () => {
    const missing = (command: string, debianPackage: string): Prerequisite => ({
      command,
      debianPackage,
      purpose: `${command} is needed`,
      optional: false,
      present: () => false,
    });
    const said: string[] = [];
    const saved = process.env.PLAYBOOK_NO_INSTALL;
    process.env.PLAYBOOK_NO_INSTALL = "1";
    try {
      expect(() =>
        ensurePrerequisites({
          install: false,
          log: (line) => said.push(line),
          prerequisites: [missing("podman", "podman"), missing("debootstrap", "debootstrap")],
        }),
      ).toThrow(
        new MissingPrerequisiteError(
          "podman is not on PATH (podman is needed)\ndebootstrap is not on PATH (debootstrap is needed)\n" +
            `install them with \`${aptInstallLine(["podman", "debootstrap"])}\` (not installed: PLAYBOOK_NO_INSTALL=1 declined)`,
        ),
      );
    } finally {
      if (saved === undefined) delete process.env.PLAYBOOK_NO_INSTALL;
      else process.env.PLAYBOOK_NO_INSTALL = saved;
    }
    expect(said).toEqual([]);
  });
});
