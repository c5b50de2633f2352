/* unicode.c: the UTF-8 and GPT-2 byte-level helpers the tokenizer needs. Decoding follows
 * llama.cpp's unicode_cpt_from_utf8 (lenient: no overlong or surrogate checks) because token
 * boundaries must match it byte for byte; the strict checks live in the detokenizer. */
#include "tokenizer/tk_internal.h"

int tk_utf8_len(unsigned char c) {
    static const int lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[c >> 4];
}

uint32_t tk_utf8_decode(const char *str, size_t n, size_t *i) {
    const unsigned char *s = (const unsigned char *)str;
    size_t o = *i;
    unsigned char c = s[o];
    if (!(c & 0x80)) {
        *i = o + 1;
        return c;
    }
    if (!(c & 0x40)) goto bad; /* stray continuation byte */
    if (!(c & 0x20)) {
        if (o + 1 >= n || (s[o + 1] & 0xc0) != 0x80) goto bad;
        *i = o + 2;
        return ((uint32_t)(c & 0x1f) << 6) | (s[o + 1] & 0x3f);
    }
    if (!(c & 0x10)) {
        if (o + 2 >= n || (s[o + 1] & 0xc0) != 0x80 || (s[o + 2] & 0xc0) != 0x80) goto bad;
        *i = o + 3;
        return ((uint32_t)(c & 0x0f) << 12) | ((uint32_t)(s[o + 1] & 0x3f) << 6) | (s[o + 2] & 0x3f);
    }
    if (!(c & 0x08)) {
        if (o + 3 >= n || (s[o + 1] & 0xc0) != 0x80 || (s[o + 2] & 0xc0) != 0x80 ||
            (s[o + 3] & 0xc0) != 0x80)
            goto bad;
        *i = o + 4;
        return ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[o + 1] & 0x3f) << 12) |
               ((uint32_t)(s[o + 2] & 0x3f) << 6) | (s[o + 3] & 0x3f);
    }
bad:
    *i = o + 1;
    return 0xFFFD;
}

int tk_utf8_encode(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xc0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xe0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (unsigned char)(0xf0 | ((cp >> 18) & 0x07));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}

/* GPT-2's bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other 68 bytes to
 * U+0100.. in byte order. */
static bool printable_byte(unsigned b) {
    return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
}

uint32_t tk_byte_to_cp(uint8_t b) {
    /* The 68 non-printable bytes are 0x00-0x20, 0x7f-0xa0 and 0xad, numbered in that order. */
    if (printable_byte(b)) return b;
    if (b <= 0x20) return 0x100u + b;
    if (b >= 0x7f && b <= 0xa0) return 0x100u + 33 + (b - 0x7fu);
    return 0x100u + 67; /* 0xad */
}

int tk_cp_to_byte(uint32_t cp) {
    if (cp < 0x100) return printable_byte(cp) ? (int)cp : -1;
    if (cp <= 0x120) return (int)(cp - 0x100);
    if (cp <= 0x142) return (int)(0x7f + (cp - 0x121));
    if (cp == 0x143) return 0xad;
    return -1;
}
