package dev.ballast.member;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.MessageDigest;
import java.security.PrivateKey;
import java.security.PublicKey;
import java.security.Signature;
import java.security.spec.PKCS8EncodedKeySpec;
import java.security.spec.X509EncodedKeySpec;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.Comparator;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;

/**
 * The signatures of docs/protocol.md ("Signed records"), as controller/wire/signing.py
 * makes them: Ed25519 over a domain, the key, the value and every other header, each
 * length-prefixed. A member verifies the controller's grants with {@link Verifier} and
 * signs its own heartbeats with {@link HeartbeatSigner}, so the controller counts an
 * acknowledgement only from the member it names.
 */
final class Signing {
    static final String SIGNATURE_HEADER = "ballast-signature";
    static final String KEY_ID_HEADER = "ballast-key-id";
    static final String SEQUENCE_HEADER = "ballast-sequence";
    private static final int MAX_KEY_FILE = 64 * 1024;

    private Signing() {}

    /** A key file that is missing, unreadable or not an Ed25519 key (the message says which). */
    static final class KeyFileError extends IllegalArgumentException {
        private static final long serialVersionUID = 1L;

        KeyFileError(String why) {
            super(why);
        }
    }

    /** The exact bytes a signature covers (controller/wire/signing.py, {@code signed_bytes}). */
    static byte[] signedBytes(String domain, byte[] key, byte[] value, List<Header> headers) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        out.writeBytes("ballast-signature/1".getBytes(StandardCharsets.US_ASCII));
        out.writeBytes(domain.getBytes(StandardCharsets.US_ASCII));
        field(out, key);
        if (value == null) {
            out.write(0);
        } else {
            out.write(1);
            field(out, value);
        }
        List<Header> sorted = new ArrayList<>();
        for (Header h : headers) {
            if (!h.key().equals(SIGNATURE_HEADER)) sorted.add(h);
        }
        sorted.sort(Comparator.comparing(Header::key).thenComparing(Header::value, Arrays::compareUnsigned));
        for (Header h : sorted) {
            field(out, h.key().getBytes(StandardCharsets.UTF_8));
            field(out, h.value());
        }
        return out.toByteArray();
    }

    /** A public key's short name: 16 hex digits of the SHA-256 of its raw 32 bytes. */
    static String keyId(PublicKey key) {
        byte[] spki = key.getEncoded(); // a 12-byte SubjectPublicKeyInfo prefix, then the raw key
        byte[] raw = Arrays.copyOfRange(spki, spki.length - 32, spki.length);
        try {
            return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(raw)).substring(0, 16);
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException(e);
        }
    }

    static PublicKey loadPublic(Path path) {
        byte[] der = pem(path, "PUBLIC KEY", "public");
        try {
            return KeyFactory.getInstance("Ed25519").generatePublic(new X509EncodedKeySpec(der));
        } catch (GeneralSecurityException e) {
            throw new KeyFileError(path + ": not an Ed25519 public key");
        }
    }

    static PrivateKey loadPrivate(Path path) {
        byte[] der = pem(path, "PRIVATE KEY", "private");
        try {
            return KeyFactory.getInstance("Ed25519").generatePrivate(new PKCS8EncodedKeySpec(der));
        } catch (GeneralSecurityException e) {
            throw new KeyFileError(path + ": not an Ed25519 private key (PKCS#8 PEM, no password)");
        }
    }

    /** The controller's public keys a member accepts (more than one while a key is replaced). */
    static final class Verifier {
        private final Map<String, PublicKey> keys = new TreeMap<>();

        Verifier(List<PublicKey> publicKeys) {
            if (publicKeys.isEmpty()) throw new IllegalArgumentException("a verifier needs a public key");
            publicKeys.forEach(k -> keys.put(keyId(k), k));
        }

        /** The ids of the keys accepted, sorted: what the member announces ({@code verify_keys}). */
        List<String> keyIds() {
            return List.copyOf(keys.keySet());
        }

        /** Null when an accepted key signed the record, else why it does not count. */
        String problem(String domain, byte[] key, byte[] value, Iterable<Header> raw) {
            List<Header> headers = new ArrayList<>();
            List<byte[]> signatures = new ArrayList<>();
            List<byte[]> named = new ArrayList<>();
            for (Header h : raw) {
                if (h.value() == null) return "header " + h.key() + " has no value";
                headers.add(h);
                if (h.key().equals(SIGNATURE_HEADER)) signatures.add(h.value());
                if (h.key().equals(KEY_ID_HEADER)) named.add(h.value());
            }
            if (signatures.isEmpty()) return "unsigned record (a verify key is configured: only signed records count)";
            if (signatures.size() > 1) return "more than one signature header";
            if (named.size() > 1) return "more than one key id header";
            List<PublicKey> candidates = new ArrayList<>(keys.values());
            if (!named.isEmpty()) {
                PublicKey wanted = keys.get(new String(named.get(0), StandardCharsets.US_ASCII));
                if (wanted == null) return "signed with a key that is not among the configured public keys";
                candidates = List.of(wanted);
            }
            byte[] covered = signedBytes(domain, key, value, headers);
            for (PublicKey candidate : candidates) {
                try {
                    Signature check = Signature.getInstance("Ed25519");
                    check.initVerify(candidate);
                    check.update(covered);
                    if (check.verify(signatures.get(0))) return null;
                } catch (GeneralSecurityException e) {
                    // a malformed signature: no key verifies it
                }
            }
            return "signature does not verify with the configured public keys";
        }
    }

    /**
     * A member's own key: each heartbeat gets a sequence newer than any this process wrote
     * (nanoseconds since the epoch, so newer across restarts too) and the signature over it.
     * No key id header: the controller holds one key per member and tries it.
     */
    static final class HeartbeatSigner {
        private final PrivateKey key;
        private long last;

        HeartbeatSigner(PrivateKey key) {
            this.key = key;
        }

        List<Header> headers(byte[] recordKey, byte[] value) {
            java.time.Instant now = java.time.Instant.now();
            last = Math.max(now.getEpochSecond() * 1_000_000_000L + now.getNano(), last + 1);
            Header sequence = new RecordHeader(SEQUENCE_HEADER, Long.toString(last).getBytes(StandardCharsets.US_ASCII));
            try {
                Signature sign = Signature.getInstance("Ed25519");
                sign.initSign(key);
                sign.update(signedBytes("heartbeats", recordKey, value, List.of(sequence)));
                return List.of(sequence, new RecordHeader(SIGNATURE_HEADER, sign.sign()));
            } catch (GeneralSecurityException e) {
                throw new IllegalStateException(e);
            }
        }
    }

    private static void field(ByteArrayOutputStream out, byte[] bytes) {
        out.writeBytes(ByteBuffer.allocate(4).putInt(bytes.length).array());
        out.writeBytes(bytes);
    }

    private static byte[] pem(Path path, String label, String kind) {
        String text;
        try {
            if (Files.size(path) > MAX_KEY_FILE) throw new KeyFileError(path + ": too large to be a " + kind + " key");
            text = Files.readString(path, StandardCharsets.US_ASCII);
        } catch (IOException e) {
            throw new KeyFileError(path + ": cannot read the " + kind + " key: " + e.getMessage());
        }
        String begin = "-----BEGIN " + label + "-----";
        String end = "-----END " + label + "-----";
        int from = text.indexOf(begin);
        int to = text.indexOf(end);
        if (from < 0 || to < from) throw new KeyFileError(path + ": not a PEM " + kind + " key");
        try {
            return Base64.getMimeDecoder().decode(text.substring(from + begin.length(), to));
        } catch (IllegalArgumentException e) {
            throw new KeyFileError(path + ": not a PEM " + kind + " key");
        }
    }
}
