// The log API's pure parts: whom a request's headers name, and only when the API server's front
// proxy sent them (src/controller/log-archive/log-api-access.ts); the self-signed certificate it
// serves with when none is given (self-signed.ts), as TLS clients read it. The whole path through
// the API server is test/controller/log-api.test.ts.
import { X509Certificate } from "node:crypto";
import https from "node:https";
import type { AddressInfo } from "node:net";
import type { TLSSocket } from "node:tls";
import { describe, expect, it } from "vitest";
import { type RequestHeaderSettings, remoteUserOf } from "../../src/controller/log-archive/log-api-access.js";
import { selfSignedCertificate } from "../../src/controller/log-archive/self-signed.js";

const SETTINGS: RequestHeaderSettings = {
  clientCa: "",
  allowedNames: ["front-proxy-client"],
  usernameHeaders: ["X-Remote-User"],
  groupHeaders: ["X-Remote-Group"],
  extraHeaderPrefixes: ["X-Remote-Extra-"],
};

/** What the TLS layer says of a connection: whether its certificate chains to the CA, and its name. */
const connection = (authorized: boolean, commonName?: string) =>
  ({
    authorized,
    getPeerCertificate: () => (commonName === undefined ? {} : { subject: { CN: commonName } }),
  }) as unknown as TLSSocket;

describe("the caller the log API believes", () => {
  it.each([
    {
      name: "the front proxy's user, groups and extras",
      socket: connection(true, "front-proxy-client"),
      headers: {
        "x-remote-user": "alice",
        "x-remote-group": ["system:authenticated", "team-a"],
        "x-remote-extra-scopes%2fa": "read",
      },
      expected: {
        user: {
          name: "alice",
          uid: undefined,
          groups: ["system:authenticated", "team-a"],
          extra: { "scopes/a": ["read"] },
        },
      },
    },
    {
      name: "no one, without a certificate the requestheader CA signed",
      socket: connection(false),
      headers: { "x-remote-user": "alice" },
      expected: { refused: expect.stringContaining("no client certificate") },
    },
    {
      name: "no one, from a certificate of a name not allowed",
      socket: connection(true, "someone-else"),
      headers: { "x-remote-user": "alice" },
      expected: { refused: expect.stringContaining("someone-else is not an allowed front proxy") },
    },
    {
      name: "no one, when the front proxy names no user",
      socket: connection(true, "front-proxy-client"),
      headers: {},
      expected: { refused: "the front proxy named no user" },
    },
  ])("$name", ({ socket, headers, expected }) => {
    expect(remoteUserOf(socket, headers, SETTINGS)).toEqual(expected);
  });

  it("takes any name the CA signed when the API server allows every name", () => {
    const result = remoteUserOf(
      connection(true, "anything"),
      { "x-remote-user": "bob" },
      { ...SETTINGS, allowedNames: [] },
    );
    expect(result).toMatchObject({ user: { name: "bob" } });
  });
});

describe("the log API's self-signed certificate", () => {
  it("names the Service, signs itself and serves TLS", async () => {
    const now = new Date("2026-12-07T06:00:00Z");
    const { cert, key } = selfSignedCertificate(["playbook-controller-log-api", "localhost"], now);
    const x509 = new X509Certificate(cert);
    expect(x509.subjectAltName).toBe("DNS:playbook-controller-log-api, DNS:localhost");
    expect(x509.verify(x509.publicKey)).toBe(true);
    expect(new Date(x509.validFrom).getTime()).toBeLessThanOrEqual(now.getTime());
    expect(new Date(x509.validTo).getTime()).toBeGreaterThan(now.getTime() + 300 * 86_400_000);

    const server = https.createServer({ cert, key }, (_, response) => response.end("ok"));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const body = await new Promise<string>((resolve, reject) =>
        https
          .get(
            {
              host: "127.0.0.1",
              port: (server.address() as AddressInfo).port,
              ca: cert,
              servername: "localhost",
            },
            (response) => {
              let text = "";
              response.on("data", (chunk: Buffer) => {
                text += chunk.toString();
              });
              response.on("end", () => resolve(text));
            },
          )
          .on("error", reject),
      );
      expect(body).toBe("ok");
    } finally {
      server.close();
    }
  });
});
