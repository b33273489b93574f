package dev.ballast.member;

import dev.ballast.member.Records.Entry;
import dev.ballast.member.Records.Fence;
import dev.ballast.member.Records.Grant;

/**
 * Which records count for one member, read from its key's partition in offset order: the
 * rule every reader applies (docs/protocol.md; controller/wire/fencing.py is the same rule
 * in Python). A fence marker raises the partition's floor; a record below the floor, or
 * below its key's current epoch, was written by a deposed leader and is ignored; of the
 * rest, the record with the highest (epoch, generation) is the member's current one.
 */
final class FencingView {
    enum Verdict { FENCE, CURRENT, FENCED, STALE, NOT_OURS }

    private final String group;
    private final String member;
    private long floor = -1;
    /** (epoch, generation, tombstone last) of the current record; null before the first. */
    private long[] current;

    FencingView(String group, String member) {
        this.group = group;
        this.member = member;
    }

    Verdict add(Entry entry) {
        if (!entry.group().equals(group)) return Verdict.NOT_OURS;
        if (entry instanceof Fence fence) {
            floor = Math.max(floor, fence.epoch());
            return Verdict.FENCE;
        }
        Grant grant = (Grant) entry;
        if (!grant.member().equals(member)) return Verdict.NOT_OURS;
        long[] order = orderOf(grant);
        if (order[0] < Math.max(floor, current == null ? -1 : current[0])) return Verdict.FENCED;
        if (current != null && compare(order, current) <= 0) return Verdict.STALE;
        current = order;
        return Verdict.CURRENT;
    }

    /** The current record's generation (what a member acknowledges once it applied it). */
    long generation() {
        return current == null ? -1 : current[1];
    }

    long floor() {
        return floor;
    }

    private long[] orderOf(Grant grant) {
        if (!grant.tombstone()) return new long[] {grant.epoch(), grant.generation(), 0};
        // A tombstone without headers (a foreign writer's delete) takes its key's place.
        long epoch = grant.epoch() >= 0 ? grant.epoch() : Math.max(floor, current == null ? 0 : current[0]);
        long generation = grant.generation() >= 0 ? grant.generation() : (current == null ? 0 : current[1]);
        return new long[] {epoch, generation, 1};
    }

    private static int compare(long[] a, long[] b) {
        for (int i = 0; i < a.length; i++) {
            int c = Long.compare(a[i], b[i]);
            if (c != 0) return c;
        }
        return 0;
    }
}
