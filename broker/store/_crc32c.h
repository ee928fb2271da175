/* CRC-32C for the store's native walker (broker/store/_walk.c) and its publish-path records
 * (broker/store/_records.c), each with its own copy of the tables.
 *
 * Castagnoli's polynomial, reflected (0x82F63B78), the checksum of every record
 * (docs/store.md) and what the crc32c package computes: crc32c(value, data) continues from
 * ``value`` like crc32c.crc32c(data, value). With the CPU's CRC instruction (SSE 4.2) when
 * it has one, else eight tables (slicing by 8; little-endian hosts, checked at import).
 * Call crc_init() once first.
 */
#ifndef QPIDD_STORE_CRC32C_H
#define QPIDD_STORE_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static uint32_t table[8][256];
static int hardware;

static void crc_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int t = 1; t < 8; t++)
            table[t][n] = (table[t - 1][n] >> 8) ^ table[0][table[t - 1][n] & 0xff];
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    hardware = __builtin_cpu_supports("sse4.2") != 0;
#endif
}

static uint32_t crc_software(uint32_t crc, const unsigned char *p, size_t n) {
    crc = ~crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8); /* little-endian hosts only (checked at import) */
        v ^= crc;
        crc = table[7][v & 0xff] ^ table[6][(v >> 8) & 0xff] ^ table[5][(v >> 16) & 0xff] ^
              table[4][(v >> 24) & 0xff] ^ table[3][(v >> 32) & 0xff] ^
              table[2][(v >> 40) & 0xff] ^ table[1][(v >> 48) & 0xff] ^ table[0][v >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("sse4.2"))) static uint32_t crc_hardware(uint32_t crc,
                                                               const unsigned char *p,
                                                               size_t n) {
    uint64_t c = ~crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
    return ~c32;
}
#endif

static uint32_t crc32c(uint32_t crc, const unsigned char *p, size_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (hardware) return crc_hardware(crc, p, n);
#endif
    return crc_software(crc, p, n);
}

#endif
