/*
 * snapshot-hook-native: the agents' after-tool hook without a Python start-up.
 *
 * Built by `snapshotd native-hook` (cc, no library but libc). It takes the one path that is
 * hot: the daemon is up and trusted. It reads the agent's payload from stdin, sends it as it
 * is to the daemon's `hook` op (docs/protocol.md, "hook") with the hook's working directory
 * and the environment variables snapshot-hook reads (RELAYED_ENV; the same names as
 * snapshotd_client.hook.RELAYED_ENV), and exits 0 once the daemon has run the capture: the
 * daemon attributes the payload and records any gap exactly as snapshot-hook would.
 *
 * Everything else goes to the Python hook, whose path is compiled in (FALLBACK_HOOK), by
 * exec: a setting it does not take as plain as given, an unusual socket path, a socket or
 * directory that fails the trust checks, no daemon (the Python hook starts one), a payload too
 * big for one frame, a refusal, a reply it cannot read, the daemon asking for it (a session's
 * lifecycle event), and no reply before the capture's deadline (the Python hook then finds
 * the deadline passed and writes the timeout gap). The Python hook gets the payload already
 * read on its stdin and this hook's start in SNAPSHOTD_HOOK_STARTED_NS, so the two share one
 * budget (SNAPSHOTD_HOOK_TIMEOUT_MS) and nothing is read or run twice.
 *
 * Promises, as snapshot-hook's: exit 0, nothing on stdout or stderr (both are left alone for
 * the Python hook), the agent's pipes never held by a child, a socket trusted only when it
 * passes the same checks (directory and socket owned by this user, the directory not writable
 * by group or others, the listener's uid this user's).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

#ifndef FALLBACK_HOOK
#error "build with -DFALLBACK_HOOK='\"/path/to/snapshot-hook\"' (snapshotd native-hook does)"
#endif

static const char *const RELAYED_ENV[] = {
    "SNAPSHOTD_RUN_ID", "SNAPSHOTD_NODE_ID", "SNAPSHOTD_ITERATION", "SNAPSHOTD_ATTEMPT",
    "CLAUDE_PROJECT_DIR", "GEMINI_PROJECT_DIR", NULL,
};

enum {
    MAX_FRAME = 1 << 20,           /* protocol.MAX_FRAME: bytes of msgpack body */
    FRAME_SPARE = 64 << 10,        /* what the frame holds besides the payload, at most */
    DEFAULT_TIMEOUT_MS = 5000,     /* snapshotd_client.hook.DEFAULT_TIMEOUT_MS */
    MIN_TIMEOUT_MS = 100,
    MAX_TIMEOUT_MS = 120000,
    GAP_RESERVE_MS = 50,           /* hook._GAP_RESERVE_S */
    REQUEST_ID = 1,
};

struct buf {
    unsigned char *data;
    size_t len, cap;
};

static int64_t now_ns(void);
static int budget_from_env(int *budget_ms);
static int socket_path(char *out, size_t size);
static int socket_trusted(const char *path);
static int read_stdin(struct buf *in, int64_t deadline);
static int build_frame(struct buf *frame, const struct buf *payload);
static int exchange(const char *path, const struct buf *frame, int64_t deadline, int *fallback);
static _Noreturn void hand_over(const struct buf *payload, int64_t started);
static int put(struct buf *b, const void *data, size_t n);

int main(void)
{
    int64_t started = now_ns();
    int budget_ms;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    if (!budget_from_env(&budget_ms) || !socket_path(path, sizeof path))
        hand_over(NULL, started); /* stdin untouched: the Python hook reads it */
    int64_t deadline = started + (int64_t)budget_ms * 1000000;
    int reserve_ms = budget_ms / 10 < GAP_RESERVE_MS ? budget_ms / 10 : GAP_RESERVE_MS;
    int64_t capture_deadline = deadline - (int64_t)reserve_ms * 1000000;

    struct buf payload = {0}, frame = {0};
    if (!read_stdin(&payload, deadline))
        hand_over(NULL, started); /* not closed in time: the Python hook, past the deadline
                                     it shares, records that at once */
    int fallback = 1;
    if (payload.len <= MAX_FRAME - FRAME_SPARE && socket_trusted(path)
            && build_frame(&frame, &payload)
            && exchange(path, &frame, capture_deadline, &fallback) && !fallback)
        return 0;
    hand_over(&payload, started);
    return 0;
}

/* -- settings and paths, as snapshotd_client.hook and snapshotd_client.paths read them -- */

static int64_t now_ns(void)
{
    struct timespec ts;
#ifdef __APPLE__
    clock_gettime(CLOCK_UPTIME_RAW, &ts); /* what Python's time.monotonic() reads there */
#else
    clock_gettime(CLOCK_MONOTONIC, &ts);
#endif
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Unset or empty: the default; plain digits in range: that; anything else (which the Python
 * hook clamps or replaces and notes in its gaps): 0, so the Python hook decides. */
static int budget_from_env(int *budget_ms)
{
    const char *raw = getenv("SNAPSHOTD_HOOK_TIMEOUT_MS");
    if (raw == NULL || *raw == '\0') {
        *budget_ms = DEFAULT_TIMEOUT_MS;
        return 1;
    }
    size_t n = strlen(raw);
    if (n > 6)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (raw[i] < '0' || raw[i] > '9')
            return 0;
    long value = strtol(raw, NULL, 10);
    if (value < MIN_TIMEOUT_MS || value > MAX_TIMEOUT_MS)
        return 0;
    *budget_ms = (int)value;
    return 1;
}

/* A path that needs no normalising: absolute, no "//", no "." or ".." component. */
static int plain_absolute(const char *p)
{
    if (p[0] != '/')
        return 0;
    for (const char *c = p; *c; c++) {
        if (c[0] == '/' && (c[1] == '/' || (c[1] == '.' && (c[2] == '/' || c[2] == '\0'
                || (c[2] == '.' && (c[3] == '/' || c[3] == '\0'))))))
            return 0;
    }
    return 1;
}

/* SNAPSHOTD_SOCKET, $XDG_RUNTIME_DIR/snapshotd/snapshotd.sock, /tmp/snapshotd-<uid>/...; 0
 * when the Python hook should resolve it (a relative or unnormalised value, too long). */
static int socket_path(char *out, size_t size)
{
    const char *chosen = getenv("SNAPSHOTD_SOCKET");
    const char *runtime = getenv("XDG_RUNTIME_DIR");
    int n;
    if (chosen != NULL && *chosen != '\0') {
        if (!plain_absolute(chosen) || chosen[strlen(chosen) - 1] == '/')
            return 0;
        n = snprintf(out, size, "%s", chosen);
    } else if (runtime != NULL && runtime[0] == '/') {
        size_t len = strlen(runtime);
        n = snprintf(out, size, "%s%ssnapshotd/snapshotd.sock", runtime,
                     runtime[len - 1] == '/' ? "" : "/");
    } else {
        n = snprintf(out, size, "/tmp/snapshotd-%u/snapshotd.sock", (unsigned)getuid());
    }
    return n > 0 && (size_t)n < size;
}

/* paths.socket_problem: any doubt (or no socket yet) means the Python hook looks again. */
static int socket_trusted(const char *path)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    size_t dlen = slash == path ? 1 : (size_t)(slash - path);
    if (dlen >= sizeof dir)
        return 0;
    memcpy(dir, path, dlen);
    dir[dlen] = '\0';
    uid_t uid = getuid();
    struct stat link, st;
    if (lstat(dir, &link) != 0)
        return 0;
    if (S_ISLNK(link.st_mode)) {
        if (link.st_uid != uid && link.st_uid != 0)
            return 0;
        if (stat(dir, &st) != 0)
            return 0;
    } else {
        st = link;
    }
    if (!S_ISDIR(st.st_mode) || st.st_uid != uid || (st.st_mode & 022))
        return 0;
    if (stat(path, &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_uid != uid)
        return 0;
    return 1;
}

/* -- the exchange ------------------------------------------------------------------------ */

static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - now_ns();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, (int)((left + 999999) / 1000000));
        if (r > 0)
            return 1;
        if (r < 0 && errno != EINTR)
            return 0;
    }
}

/* All of stdin until it closes; 0 when it did not close by the deadline, or could not be
 * held (the Python hook then reads on from where this stopped, its deadline passed). */
static int read_stdin(struct buf *in, int64_t deadline)
{
    for (;;) {
        if (in->cap - in->len < 65536) {
            size_t cap = in->cap ? in->cap * 2 : 131072;
            unsigned char *data = realloc(in->data, cap);
            if (data == NULL)
                return 0;
            in->data = data;
            in->cap = cap;
        }
        if (!wait_fd(0, POLLIN, deadline))
            return 0;
        ssize_t n = read(0, in->data + in->len, in->cap - in->len);
        if (n == 0)
            return 1;
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return 1; /* as the Python hook: what was read is the payload */
        }
        in->len += (size_t)n;
    }
}

static int put(struct buf *b, const void *data, size_t n)
{
    if (b->cap - b->len < n) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->len < n)
            cap *= 2;
        unsigned char *grown = realloc(b->data, cap);
        if (grown == NULL)
            return 0;
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, n);
    b->len += n;
    return 1;
}

static int put_be(struct buf *b, unsigned char tag, uint32_t n, int width)
{
    unsigned char out[5] = {tag};
    for (int i = 0; i < width; i++)
        out[1 + i] = (unsigned char)(n >> (8 * (width - 1 - i)));
    return put(b, out, (size_t)width + 1);
}

static int put_str(struct buf *b, const char *s)
{
    size_t n = strlen(s);
    unsigned char tag = (unsigned char)(0xa0 | n);
    return (n < 32 ? put(b, &tag, 1) : put_be(b, 0xd9, (uint32_t)n, 1)) && put(b, s, n);
}

static int put_bin(struct buf *b, const void *data, size_t n)
{
    int ok = n < 256 ? put_be(b, 0xc4, (uint32_t)n, 1)
           : n < 65536 ? put_be(b, 0xc5, (uint32_t)n, 2) : put_be(b, 0xc6, (uint32_t)n, 4);
    return ok && put(b, data, n);
}

/* {"v": 1, "op": "hook", "id": 1, "payload": bin, "env": {name: bin}[, "cwd": bin]}, behind
 * its 4-byte big-endian length. Names are short ASCII; values are bytes as the OS has them. */
static int build_frame(struct buf *frame, const struct buf *payload)
{
    char cwd[PATH_MAX];
    int have_cwd = getcwd(cwd, sizeof cwd) != NULL;
    int nenv = 0;
    for (int i = 0; RELAYED_ENV[i]; i++)
        nenv += getenv(RELAYED_ENV[i]) != NULL;
    unsigned char header[4] = {0}, map = (unsigned char)(0x80 | (5 + have_cwd));
    unsigned char one = 1, env_map = (unsigned char)(0x80 | nenv);
    if (!put(frame, header, 4) || !put(frame, &map, 1)
            || !put_str(frame, "v") || !put(frame, &one, 1)
            || !put_str(frame, "op") || !put_str(frame, "hook")
            || !put_str(frame, "id") || !put(frame, &one, 1)
            || !put_str(frame, "payload") || !put_bin(frame, payload->data, payload->len)
            || !put_str(frame, "env") || !put(frame, &env_map, 1))
        return 0;
    for (int i = 0; RELAYED_ENV[i]; i++) {
        const char *value = getenv(RELAYED_ENV[i]);
        if (value != NULL && !(put_str(frame, RELAYED_ENV[i])
                               && put_bin(frame, value, strlen(value))))
            return 0;
    }
    if (have_cwd && !(put_str(frame, "cwd") && put_bin(frame, cwd, strlen(cwd))))
        return 0;
    size_t body = frame->len - 4;
    if (body > MAX_FRAME)
        return 0;
    for (int i = 0; i < 4; i++)
        frame->data[i] = (unsigned char)(body >> (8 * (3 - i)));
    return 1;
}

static int connect_to(const char *path, int64_t deadline)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path, path, strlen(path) + 1);
    for (;;) {
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd < 0)
            return -1;
        (void)fcntl(fd, F_SETFD, FD_CLOEXEC); /* never the Python hook's */
#ifdef SO_NOSIGPIPE
        int on = 1; /* macOS: a daemon gone mid-send is an error, not a SIGPIPE */
        (void)setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &on, sizeof on);
#endif
        if (connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0)
            return fd;
        int err = errno;
        close(fd);
        /* EAGAIN: the daemon's backlog is full; it is alive, so wait a little. */
        if (err != EAGAIN || now_ns() + 5000000 >= deadline)
            return -1;
        struct timespec pause = {0, 5000000};
        nanosleep(&pause, NULL);
    }
}

static int peer_is_us(int fd)
{
#ifdef SO_PEERCRED
    struct ucred cred;
    socklen_t len = sizeof cred;
    return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid == getuid();
#else
    uid_t euid;
    gid_t egid;
    return getpeereid(fd, &euid, &egid) == 0 && euid == getuid();
#endif
}

static int send_all(int fd, const unsigned char *data, size_t n, int64_t deadline)
{
    while (n > 0) {
        if (!wait_fd(fd, POLLOUT, deadline))
            return 0;
#ifdef MSG_NOSIGNAL
        ssize_t sent = send(fd, data, n, MSG_NOSIGNAL);
#else
        ssize_t sent = write(fd, data, n);
#endif
        if (sent < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return 0;
        }
        data += sent;
        n -= (size_t)sent;
    }
    return 1;
}

static int recv_all(int fd, unsigned char *data, size_t n, int64_t deadline)
{
    while (n > 0) {
        if (!wait_fd(fd, POLLIN, deadline))
            return 0;
        ssize_t got = read(fd, data, n);
        if (got == 0)
            return 0;
        if (got < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return 0;
        }
        data += got;
        n -= (size_t)got;
    }
    return 1;
}

/* -- the reply: just enough msgpack to read {"id": 1, "ok": true, "result": {"fallback": b}} */

struct cursor {
    const unsigned char *p, *end;
};

static int take(struct cursor *c, size_t n, const unsigned char **out)
{
    if ((size_t)(c->end - c->p) < n)
        return 0;
    *out = c->p;
    c->p += n;
    return 1;
}

static int uint_be(struct cursor *c, int width, uint32_t *n)
{
    const unsigned char *b;
    if (!take(c, (size_t)width, &b))
        return 0;
    *n = 0;
    for (int i = 0; i < width; i++)
        *n = (*n << 8) | b[i];
    return 1;
}

/* The length of a map at the cursor, or -1 when it is something else. */
static long map_len(struct cursor *c)
{
    const unsigned char *t;
    uint32_t n;
    if (!take(c, 1, &t))
        return -1;
    if ((*t & 0xf0) == 0x80)
        return *t & 0x0f;
    if ((*t == 0xde && uint_be(c, 2, &n)) || (*t == 0xdf && uint_be(c, 4, &n)))
        return (long)n;
    return -1;
}

static int skip(struct cursor *c, int depth);

/* The string at the cursor (a map's key); 0 when it is not one. */
static int str_at(struct cursor *c, const unsigned char **s, uint32_t *n)
{
    const unsigned char *t;
    if (!take(c, 1, &t))
        return 0;
    if ((*t & 0xe0) == 0xa0)
        *n = *t & 0x1f;
    else if (!((*t == 0xd9 && uint_be(c, 1, n)) || (*t == 0xda && uint_be(c, 2, n))
               || (*t == 0xdb && uint_be(c, 4, n))))
        return 0;
    return take(c, *n, s);
}

static int is(const unsigned char *s, uint32_t n, const char *want)
{
    return n == strlen(want) && memcmp(s, want, n) == 0;
}

/* Move past one value of any type; 0 when it is cut short or nested absurdly deep. */
static int skip(struct cursor *c, int depth)
{
    const unsigned char *t, *unused;
    uint32_t n = 0, items = 0;
    if (depth > 32 || !take(c, 1, &t))
        return 0;
    unsigned char b = *t;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
        return 1;
    if ((b & 0xe0) == 0xa0)
        return take(c, b & 0x1f, &unused);
    if ((b & 0xf0) == 0x90)
        items = b & 0x0f;
    else if ((b & 0xf0) == 0x80)
        items = 2u * (b & 0x0f);
    else switch (b) {
    case 0xc4: case 0xd9: return uint_be(c, 1, &n) && take(c, n, &unused);
    case 0xc5: case 0xda: return uint_be(c, 2, &n) && take(c, n, &unused);
    case 0xc6: case 0xdb: return uint_be(c, 4, &n) && take(c, n, &unused);
    case 0xc7: return uint_be(c, 1, &n) && take(c, (size_t)n + 1, &unused);
    case 0xc8: return uint_be(c, 2, &n) && take(c, (size_t)n + 1, &unused);
    case 0xc9: return uint_be(c, 4, &n) && take(c, (size_t)n + 1, &unused);
    case 0xca: return take(c, 4, &unused);
    case 0xcb: return take(c, 8, &unused);
    case 0xcc: case 0xd0: return take(c, 1, &unused);
    case 0xcd: case 0xd1: return take(c, 2, &unused);
    case 0xce: case 0xd2: return take(c, 4, &unused);
    case 0xcf: case 0xd3: return take(c, 8, &unused);
    case 0xd4: return take(c, 2, &unused);
    case 0xd5: return take(c, 3, &unused);
    case 0xd6: return take(c, 5, &unused);
    case 0xd7: return take(c, 9, &unused);
    case 0xd8: return take(c, 17, &unused);
    case 0xdc: if (!uint_be(c, 2, &items)) return 0; break;
    case 0xdd: if (!uint_be(c, 4, &items)) return 0; break;
    case 0xde: if (!uint_be(c, 2, &items)) return 0; items *= 2; break;
    case 0xdf: if (!uint_be(c, 4, &items) || items > (uint32_t)(c->end - c->p)) return 0;
               items *= 2; break;
    default: return 0; /* 0xc1: never used */
    }
    for (uint32_t i = 0; i < items; i++)
        if (!skip(c, depth + 1))
            return 0;
    return 1;
}

/* 1 with *fallback 0 when the daemon ran the payload; 1 with *fallback 1 when it asks for the
 * Python hook; 0 for anything else (a refusal, another id, a reply it cannot read). */
static int read_reply(const unsigned char *body, size_t len, int *fallback)
{
    struct cursor c = {body, body + len};
    const unsigned char *key;
    uint32_t klen;
    int ok = 0, id = 0, result = 0;
    long n = map_len(&c);
    for (long i = 0; i < n; i++) {
        if (!str_at(&c, &key, &klen) || c.p >= c.end)
            return 0;
        if (is(key, klen, "ok")) {
            ok = *c.p == 0xc3;
        } else if (is(key, klen, "id")) {
            id = *c.p == REQUEST_ID;
        } else if (is(key, klen, "result")) {
            struct cursor r = c;
            long m = map_len(&r);
            for (long j = 0; j < m; j++) {
                if (!str_at(&r, &key, &klen) || r.p >= r.end)
                    return 0;
                if (is(key, klen, "fallback") && (*r.p == 0xc2 || *r.p == 0xc3)) {
                    *fallback = *r.p == 0xc3;
                    result = 1;
                }
                if (!skip(&r, 1))
                    return 0;
            }
        }
        if (!skip(&c, 0))
            return 0;
    }
    return n >= 0 && c.p == c.end && ok && id && result;
}

static int exchange(const char *path, const struct buf *frame, int64_t deadline, int *fallback)
{
    int fd = connect_to(path, deadline);
    if (fd < 0)
        return 0;
    unsigned char header[4], *body = NULL;
    int done = 0;
    if (peer_is_us(fd) && send_all(fd, frame->data, frame->len, deadline)
            && recv_all(fd, header, 4, deadline)) {
        uint32_t n = (uint32_t)header[0] << 24 | (uint32_t)header[1] << 16
                   | (uint32_t)header[2] << 8 | header[3];
        if (n <= MAX_FRAME && (body = malloc(n ? n : 1)) != NULL
                && recv_all(fd, body, n, deadline))
            done = read_reply(body, n, fallback);
    }
    free(body);
    close(fd);
    return done;
}

/* -- the hand-over ----------------------------------------------------------------------- */

/* exec the Python hook, with `payload` (when this hook read stdin) as its stdin and this
 * hook's start; never returns. */
static _Noreturn void hand_over(const struct buf *payload, int64_t started)
{
    if (payload != NULL) {
        int fd = -1;
#ifdef __linux__
        fd = memfd_create("snapshot-hook-payload", 0);
#endif
        if (fd < 0) {
            char name[] = "/tmp/snapshot-hook-XXXXXX";
            fd = mkstemp(name);
            if (fd >= 0)
                unlink(name);
        }
        size_t off = 0;
        while (fd >= 0 && off < payload->len) {
            ssize_t n = write(fd, payload->data + off, payload->len - off);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                close(fd);
                fd = -1;
                break;
            }
            off += (size_t)n;
        }
        if (fd < 0 || lseek(fd, 0, SEEK_SET) != 0 || dup2(fd, 0) < 0) {
            syslog(LOG_WARNING, "snapshot-hook-native: could not hand the payload to %s "
                   "(%s): this tool call has no checkpoint and no gap", FALLBACK_HOOK,
                   strerror(errno));
            exit(0);
        }
        if (fd != 0)
            close(fd);
    }
    char started_ns[32];
    snprintf(started_ns, sizeof started_ns, "%lld", (long long)started);
    setenv("SNAPSHOTD_HOOK_STARTED_NS", started_ns, 1);
    char *const argv[] = {(char *)FALLBACK_HOOK, NULL};
    execv(FALLBACK_HOOK, argv);
    syslog(LOG_WARNING, "snapshot-hook-native: could not run %s (%s): this tool call has no "
           "checkpoint and no gap", FALLBACK_HOOK, strerror(errno));
    exit(0);
}
