// A self-signed serving certificate for the log API when none is given (--log-api-cert-file): a
// P-256 key and an X.509 v3 certificate naming the Service's DNS names, DER-encoded here because
// node:crypto signs but makes no certificates. An APIService trusting it needs
// insecureSkipTLSVerify (as metrics-server's default install does); the chart gives a CA-signed one.
import { generateKeyPairSync, randomBytes, sign } from "node:crypto";

function length(n: number): Buffer {
  if (n < 0x80) return Buffer.from([n]);
  const bytes: number[] = [];
  for (let rest = n; rest > 0; rest >>= 8) bytes.unshift(rest & 0xff);
  return Buffer.from([0x80 | bytes.length, ...bytes]);
}

function tlv(tag: number, ...content: Buffer[]): Buffer {
  const body = Buffer.concat(content);
  return Buffer.concat([Buffer.from([tag]), length(body.length), body]);
}

const sequence = (...content: Buffer[]) => tlv(0x30, ...content);

function oid(text: string): Buffer {
  const [a = 0, b = 0, ...rest] = text.split(".").map(Number);
  const bytes = [40 * a + b];
  for (const n of rest) {
    const groups: number[] = [n & 0x7f];
    for (let v = Math.floor(n / 128); v > 0; v = Math.floor(v / 128)) groups.unshift((v & 0x7f) | 0x80);
    bytes.push(...groups);
  }
  return tlv(0x06, Buffer.from(bytes));
}

function time(date: Date): Buffer {
  const iso = date.toISOString().replace(/[-:T]/g, "").slice(0, 14);
  // UTCTime (two-digit year) through 2049, GeneralizedTime after, as RFC 5280 asks.
  return date.getUTCFullYear() < 2050
    ? tlv(0x17, Buffer.from(`${iso.slice(2)}Z`, "ascii"))
    : tlv(0x18, Buffer.from(`${iso}Z`, "ascii"));
}

const name = (commonName: string) =>
  sequence(tlv(0x31, sequence(oid("2.5.4.3"), tlv(0x0c, Buffer.from(commonName, "utf8")))));

function pem(label: string, der: Buffer): string {
  const lines = der.toString("base64").match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${label}-----\n${lines.join("\n")}\n-----END ${label}-----\n`;
}

/** A key and a self-signed certificate for `dnsNames` (the first is its common name), valid `days`. */
export function selfSignedCertificate(
  dnsNames: string[],
  now: Date,
  days = 365,
): { cert: string; key: string } {
  const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const ecdsaWithSha256 = sequence(oid("1.2.840.10045.4.3.2"));
  const serial = randomBytes(16);
  serial[0] = (serial[0] ?? 0) & 0x7f;
  const subjectAltName = sequence(...dnsNames.map((dns) => tlv(0x82, Buffer.from(dns, "ascii"))));
  const extensions = tlv(
    0xa3,
    sequence(
      sequence(oid("2.5.29.17"), tlv(0x04, subjectAltName)),
      // extendedKeyUsage: serverAuth
      sequence(oid("2.5.29.37"), tlv(0x04, sequence(oid("1.3.6.1.5.5.7.3.1")))),
    ),
  );
  const tbs = sequence(
    tlv(0xa0, tlv(0x02, Buffer.from([2]))),
    tlv(0x02, serial),
    ecdsaWithSha256,
    name(dnsNames[0] ?? "playbook-controller"),
    sequence(time(new Date(now.getTime() - 60_000)), time(new Date(now.getTime() + days * 86_400_000))),
    name(dnsNames[0] ?? "playbook-controller"),
    publicKey.export({ type: "spki", format: "der" }),
    extensions,
  );
  const signature = sign("sha256", tbs, privateKey);
  const certificate = sequence(tbs, ecdsaWithSha256, tlv(0x03, Buffer.from([0]), signature));
  return {
    cert: pem("CERTIFICATE", certificate),
    key: privateKey.export({ type: "pkcs8", format: "pem" }).toString(),
  };
}
