/* The connections bench's devices in C: many thousands of WebSocket clients on one epoll
 * loop, for set-up rates where the load generator must not eat the cores it shares with
 * the servers it measures (the Python devices of bench/lean_ws.py cost ~250 us of user
 * CPU per set-up on this machine, more than a third of the uvicorn floor's whole
 * set-up).
 *
 * Speaks bench/connections.py's client role protocol on stdin/stdout, one JSON object
 * per line: {"op": "connect", "url", "n", "dialect", "token", "concurrency", "timeout"},
 * {"op": "count"}, {"op": "close"}, {"op": "quit"}. A device does what the Python one
 * does: TCP connect, the HTTP upgrade, and after the 101 the dialect's hello as one
 * masked text frame; its set-up ends at the first text frame holding "hello.ack" or
 * "ready" (one holding "error" fails it). Devices then stay open, answer pings with
 * pongs, and count as closed on a close frame or EOF. No project code, no libraries.
 *
 * Build: cc -O2 -o lean_client lean_client.c (bench/lean_native.py does it).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { S_FREE, S_CONNECTING, S_UPGRADING, S_HELLO, S_OPEN, S_CLOSED };

typedef struct {
    int fd;
    int state;
    int64_t t0_ns;
    int device;
    char *buf;
    size_t len, cap;
} Conn;

static Conn *conns;
static size_t nconns, capconns;
static int ep;
static char upgrade_req[512];
static size_t upgrade_len;
static struct sockaddr_in target;

/* one connect op's bookkeeping */
static int op_active, op_inflight, op_done_ok, op_failed;
static double *op_latency_us;
static char op_errors[3][200];
static int op_nerrors;
static char op_dialect[16];
static char op_token[600];

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* --- a minimal reader for the orchestrator's json.dumps lines (flat objects only) */
static const char *json_find(const char *line, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ') p++;
    return p;
}

static long json_int(const char *line, const char *key, long dflt) {
    const char *p = json_find(line, key);
    return p ? strtol(p, NULL, 10) : dflt;
}

static double json_num(const char *line, const char *key, double dflt) {
    const char *p = json_find(line, key);
    return p ? strtod(p, NULL) : dflt;
}

static int json_str(const char *line, const char *key, char *out, size_t outsz) {
    const char *p = json_find(line, key);
    if (!p || *p != '"') return 0;
    p++;
    size_t i = 0;
    while (*p && *p != '"' && i + 1 < outsz) {
        if (*p == '\\' && p[1]) p++; /* the bench's tokens and urls hold no escapes */
        out[i++] = *p++;
    }
    out[i] = 0;
    return 1;
}

/* --- frames */
static size_t client_frame(uint8_t *out, const uint8_t *payload, size_t n, int opcode) {
    size_t h = 0;
    out[h++] = (uint8_t)(0x80 | opcode);
    if (n < 126) {
        out[h++] = (uint8_t)(0x80 | n);
    } else if (n < 65536) {
        out[h++] = 0x80 | 126;
        out[h++] = (uint8_t)(n >> 8);
        out[h++] = (uint8_t)n;
    } else {
        out[h++] = 0x80 | 127;
        for (int i = 7; i >= 0; i--) out[h++] = (uint8_t)(n >> (8 * i));
    }
    memset(out + h, 0, 4); /* the all-zero mask: the payload goes as it is (RFC 6455 allows it) */
    h += 4;
    memcpy(out + h, payload, n);
    return h + n;
}

static void send_all(int fd, const uint8_t *data, size_t n) {
    /* tiny writes to a socket with an empty send buffer: they go whole */
    while (n > 0) {
        ssize_t w = write(fd, data, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return;
        }
        data += w;
        n -= (size_t)w;
    }
}

static void send_frame(Conn *c, const char *payload, size_t n, int opcode) {
    uint8_t stackbuf[2048];
    uint8_t *out = n + 14 <= sizeof stackbuf ? stackbuf : malloc(n + 14);
    size_t len = client_frame(out, (const uint8_t *)payload, n, opcode);
    send_all(c->fd, out, len);
    if (out != stackbuf) free(out);
}

static void fail(Conn *c, const char *why) {
    if (op_active && c->state != S_OPEN && c->state != S_CLOSED) {
        op_failed++;
        op_inflight--;
        if (op_nerrors < 3) snprintf(op_errors[op_nerrors++], sizeof op_errors[0], "%s", why);
    }
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    c->state = S_CLOSED;
    free(c->buf);
    c->buf = NULL;
    c->len = c->cap = 0;
}

static void send_hello(Conn *c) {
    char hello[800];
    int n;
    if (strcmp(op_dialect, "iris") == 0) {
        n = snprintf(hello, sizeof hello,
                     "{\"type\": \"hello\", \"token\": \"%s\", \"device_id\": \"idle%05d\", "
                     "\"device_name\": \"bench\", \"caps\": [\"streaming\"], \"version\": 1}",
                     op_token, c->device);
    } else if (strcmp(op_dialect, "pheby") == 0) {
        n = snprintf(hello, sizeof hello,
                     "{\"type\": \"hello\", \"secret\": \"%s\", \"protocol_version\": 1}", op_token);
    } else {
        n = snprintf(hello, sizeof hello, "{\"room\": \"t0\"}");
    }
    send_frame(c, hello, (size_t)n, 1);
}

static void on_text(Conn *c, const char *p, size_t n) {
    if (c->state != S_HELLO) return;
    if (memmem(p, n, "hello.ack", 9) || memmem(p, n, "\"ready\"", 7)) {
        c->state = S_OPEN;
        if (op_active) {
            op_latency_us[op_done_ok++] = (double)(now_ns() - c->t0_ns) / 1000.0;
            op_inflight--;
        }
    } else if (memmem(p, n, "error", 5)) {
        char why[200];
        snprintf(why, sizeof why, "ConnectionError('%.*s')", (int)(n < 150 ? n : 150), p);
        fail(c, why);
    }
}

/* Frames in c->buf; returns 0 when the connection went away. */
static int parse_frames(Conn *c) {
    size_t i = 0;
    const uint8_t *d = (const uint8_t *)c->buf;
    while (c->len - i >= 2) {
        uint8_t b0 = d[i];
        uint64_t length = d[i + 1] & 0x7F;
        size_t start;
        if (length < 126) {
            start = i + 2;
        } else if (length == 126) {
            if (c->len - i < 4) break;
            length = ((uint64_t)d[i + 2] << 8) | d[i + 3];
            start = i + 4;
        } else {
            if (c->len - i < 10) break;
            length = 0;
            for (int k = 0; k < 8; k++) length = (length << 8) | d[i + 2 + k];
            start = i + 10;
        }
        if (start + length > c->len) break;
        int opcode = b0 & 0x0F;
        if (opcode == 1 || opcode == 2) {
            on_text(c, c->buf + start, (size_t)length);
            if (c->state == S_CLOSED) return 0;
        } else if (opcode == 9) {
            send_frame(c, c->buf + start, (size_t)length, 10);
        } else if (opcode == 8) {
            fail(c, "ConnectionError('closed by the server')");
            return 0;
        }
        i = start + (size_t)length;
    }
    if (i > 0) {
        memmove(c->buf, c->buf + i, c->len - i);
        c->len -= i;
    }
    return 1;
}

static void on_readable(Conn *c) {
    for (;;) {
        if (c->cap - c->len < 4096) {
            c->cap = c->cap ? c->cap * 2 : 8192;
            c->buf = realloc(c->buf, c->cap);
        }
        size_t room = c->cap - c->len;
        ssize_t r = read(c->fd, c->buf + c->len, room);
        if (r == 0) {
            fail(c, "ConnectionError('closed before the hello was answered')");
            return;
        }
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            if (errno == EINTR) continue;
            fail(c, "ConnectionError('read failed')");
            return;
        }
        c->len += (size_t)r;
        if ((size_t)r < room) break; /* a short read: the socket is drained for now */
    }
    if (c->state == S_UPGRADING) {
        char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
        if (!end) return;
        if (c->len < 12 || memcmp(c->buf, "HTTP/1.1 101", 12) != 0) {
            char why[200];
            char *eol = memmem(c->buf, c->len, "\r\n", 2);
            snprintf(why, sizeof why, "ConnectionError('%.*s')", (int)(eol - c->buf), c->buf);
            fail(c, why);
            return;
        }
        size_t used = (size_t)(end + 4 - c->buf);
        memmove(c->buf, c->buf + used, c->len - used);
        c->len -= used;
        c->state = S_HELLO;
        send_hello(c);
    }
    if (c->state == S_HELLO || c->state == S_OPEN) parse_frames(c);
    if (c->state == S_OPEN && c->len == 0) { /* idle for hours: 8 KiB x 10,000 devices back */
        free(c->buf);
        c->buf = NULL;
        c->cap = 0;
    }
}

static void fail_connect(Conn *c, int err) {
    char why[200];
    snprintf(why, sizeof why, "ConnectionRefusedError('%s')", strerror(err));
    fail(c, why);
}

static void on_writable(Conn *c) {
    int err = 0;
    socklen_t el = sizeof err;
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
    if (err) {
        fail_connect(c, err);
        return;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)(c - conns)};
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
    c->state = S_UPGRADING;
    send_all(c->fd, (const uint8_t *)upgrade_req, upgrade_len);
}

static void start_one(int device) {
    if (nconns == capconns) {
        size_t old = capconns;
        capconns = capconns ? capconns * 2 : 1024;
        Conn *grown = realloc(conns, capconns * sizeof *conns);
        if (!grown) abort();
        conns = grown;
        memset(conns + old, 0, (capconns - old) * sizeof *conns);
    }
    Conn *c = &conns[nconns++];
    memset(c, 0, sizeof *c);
    c->device = device;
    c->t0_ns = now_ns();
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    op_inflight++;
    c->state = S_CONNECTING;
    if (c->fd < 0) {
        fail(c, "OSError('socket')");
        return;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, (struct sockaddr *)&target, sizeof target) < 0 && errno != EINPROGRESS) {
        fail_connect(c, errno);
        return;
    }
    struct epoll_event ev = {.events = EPOLLOUT, .data.u64 = (uint64_t)(c - conns)};
    epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
}

static void service(int timeout_ms, int *stdin_ready) {
    struct epoll_event evs[512];
    int n = epoll_wait(ep, evs, 512, timeout_ms);
    for (int i = 0; i < n; i++) {
        if (evs[i].data.u64 == UINT64_MAX) {
            if (stdin_ready) *stdin_ready = 1;
            continue;
        }
        Conn *c = &conns[evs[i].data.u64];
        if (c->state == S_CLOSED || c->fd < 0) continue;
        if (c->state == S_CONNECTING) {
            on_writable(c);
        } else if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
            on_readable(c);
        }
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double percentile(const double *sorted, int n, double q) {
    /* bench/stats.percentile: the value at round(q * (n - 1)) of the sorted values */
    long k = lround(q * (n - 1));
    if (k >= n) k = n - 1;
    if (k < 0) k = 0;
    return sorted[k];
}

static int open_count(void) {
    int open = 0;
    for (size_t i = 0; i < nconns; i++) open += conns[i].state == S_OPEN;
    return open;
}

static void do_connect(const char *line) {
    char url[256] = "";
    json_str(line, "url", url, sizeof url);
    json_str(line, "dialect", op_dialect, sizeof op_dialect);
    json_str(line, "token", op_token, sizeof op_token);
    int n = (int)json_int(line, "n", 0);
    int concurrency = (int)json_int(line, "concurrency", 200);
    double timeout = json_num(line, "timeout", 30.0);
    /* ws://host:port/path */
    char host[64] = "127.0.0.1", path[128] = "/";
    int port = 0;
    const char *rest = strstr(url, "://");
    rest = rest ? rest + 3 : url;
    sscanf(rest, "%63[^:]:%d", host, &port);
    const char *slash = strchr(rest, '/');
    if (slash) snprintf(path, sizeof path, "%s", slash);
    memset(&target, 0, sizeof target);
    target.sin_family = AF_INET;
    target.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, host, &target.sin_addr);
    upgrade_len = (size_t)snprintf(
        upgrade_req, sizeof upgrade_req,
        "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        path, host, port);

    op_active = 1;
    op_inflight = op_done_ok = op_failed = op_nerrors = 0;
    op_latency_us = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    int base = (int)nconns, started = 0;
    int64_t t0 = now_ns();
    int64_t deadline = t0 + (int64_t)(timeout * 1e9);
    while (op_done_ok + op_failed < n) {
        int64_t now = now_ns();
        if (now > deadline) break;
        while (started < n && op_inflight < concurrency) start_one(base + started++);
        service(50, NULL);
    }
    /* what never finished counts as failed, as the Python devices' timeouts do */
    for (size_t i = (size_t)base; i < nconns; i++) {
        Conn *c = &conns[i];
        if (c->state != S_OPEN && c->state != S_CLOSED) fail(c, "TimeoutError()");
    }
    op_failed += n - started;
    double elapsed = (double)(now_ns() - t0) / 1e9;
    op_active = 0;

    qsort(op_latency_us, (size_t)op_done_ok, sizeof(double), cmp_double);
    printf("{\"connected\": %d, \"errors\": %d, \"first_errors\": [", op_done_ok, op_failed);
    for (int i = 0; i < op_nerrors; i++) {
        printf("%s\"", i ? ", " : "");
        for (const char *p = op_errors[i]; *p; p++) {
            if (*p == '"' || *p == '\\') putchar('\\');
            if ((unsigned char)*p >= 0x20) putchar(*p);
        }
        putchar('"');
    }
    printf("], \"elapsed_s\": %.3f, \"per_s\": %.1f, \"setup_latency\": ", elapsed,
           op_done_ok / elapsed);
    if (op_done_ok == 0) {
        printf("{\"n\": 0}");
    } else {
        printf("{\"n\": %d, \"p50_ms\": %.2f, \"p90_ms\": %.2f, \"p99_ms\": %.2f, \"max_ms\": %.2f}",
               op_done_ok, percentile(op_latency_us, op_done_ok, 0.50) / 1000,
               percentile(op_latency_us, op_done_ok, 0.90) / 1000,
               percentile(op_latency_us, op_done_ok, 0.99) / 1000,
               op_latency_us[op_done_ok - 1] / 1000);
    }
    printf(", \"open\": %d}\n", open_count());
    fflush(stdout);
    free(op_latency_us);
    op_latency_us = NULL;
}

static void do_close(void) {
    static const char code[2] = {0x03, (char)0xE8}; /* 1000 */
    for (size_t i = 0; i < nconns; i++) {
        Conn *c = &conns[i];
        if (c->fd >= 0) {
            if (c->state == S_OPEN) send_frame(c, code, 2, 8);
            close(c->fd);
        }
        free(c->buf);
    }
    nconns = 0;
    struct timespec second = {1, 0};
    nanosleep(&second, NULL); /* as the Python devices: let the servers see them go */
    printf("{\"ok\": true}\n");
    fflush(stdout);
}

int main(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event sev = {.events = EPOLLIN, .data.u64 = UINT64_MAX};
    epoll_ctl(ep, EPOLL_CTL_ADD, 0, &sev);
    static char line[65536];
    size_t have = 0;
    for (;;) {
        int ready = 0;
        service(1000, &ready); /* devices stay served (pings) between commands */
        if (!ready) continue;
        ssize_t r = read(0, line + have, sizeof line - 1 - have);
        if (r <= 0) return 0;
        have += (size_t)r;
        line[have] = 0;
        char *nl;
        while ((nl = memchr(line, '\n', have)) != NULL) {
            *nl = 0;
            char op[32] = "";
            json_str(line, "op", op, sizeof op);
            if (strcmp(op, "connect") == 0) {
                do_connect(line);
            } else if (strcmp(op, "count") == 0) {
                printf("{\"open\": %d}\n", open_count());
                fflush(stdout);
            } else if (strcmp(op, "close") == 0) {
                do_close();
            } else if (strcmp(op, "quit") == 0) {
                printf("{\"ok\": true}\n");
                fflush(stdout);
                return 0;
            } else {
                printf("{\"error\": \"unknown op\"}\n");
                fflush(stdout);
            }
            size_t used = (size_t)(nl + 1 - line);
            memmove(line, nl + 1, have - used);
            have -= used;
            line[have] = 0;
        }
    }
}
