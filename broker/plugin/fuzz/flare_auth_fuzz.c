/*
 * Robustness harness for flare_auth.c's parsers, built with AddressSanitizer and UndefinedBehaviorSanitizer
 * (scripts/fuzz-broker-plugin.sh). It includes the plugin's source, replaces the broker's functions with stubs
 * (topic matching comes from libmosquitto), and
 *   - signs a few valid tokens, checks they verify, then mutates them at random (byte flips, truncation,
 *     insertion, segment swaps): no mutation that differs from the original may verify;
 *   - feeds random and mutated bytes to the header, claims and control-message scanners and to the
 *     subscription-filter check.
 * Deterministic (fixed seed, or argv[2]); argv[1] = iterations. Exit 0 = no finding.
 */
#include "../flare_auth.c"

#include <stdarg.h>

/* --- broker stubs ---------------------------------------------------------------------------------------- */
static const char *stub_username = "flared";
static int kicks;

void mosquitto_log_printf(int level, const char *fmt, ...)
{
	(void)level;
	(void)fmt;
}
const char *mosquitto_client_username(const struct mosquitto *client)
{
	(void)client;
	return stub_username;
}
int mosquitto_kick_client_by_username(const char *username, bool with_will)
{
	(void)username;
	(void)with_will;
	kicks++;
	return MOSQ_ERR_SUCCESS;
}
int mosquitto_callback_register(mosquitto_plugin_id_t *identifier, int event, MOSQ_FUNC_generic_callback cb_func, const void *event_data, void *userdata)
{
	(void)identifier; (void)event; (void)cb_func; (void)event_data; (void)userdata;
	return MOSQ_ERR_SUCCESS;
}
int mosquitto_callback_unregister(mosquitto_plugin_id_t *identifier, int event, MOSQ_FUNC_generic_callback cb_func, const void *event_data)
{
	(void)identifier; (void)event; (void)cb_func; (void)event_data;
	return MOSQ_ERR_SUCCESS;
}

/* --- helpers --------------------------------------------------------------------------------------------- */
static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static size_t b64url_encode(const unsigned char *in, size_t len, char *out)
{
	static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	size_t n = 0, i = 0;
	for(; i + 3 <= len; i += 3){
		uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i+1] << 8 | in[i+2];
		out[n++] = alphabet[v >> 18 & 63]; out[n++] = alphabet[v >> 12 & 63];
		out[n++] = alphabet[v >> 6 & 63]; out[n++] = alphabet[v & 63];
	}
	if(len - i == 1){
		uint32_t v = (uint32_t)in[i] << 16;
		out[n++] = alphabet[v >> 18 & 63]; out[n++] = alphabet[v >> 12 & 63];
	}else if(len - i == 2){
		uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i+1] << 8;
		out[n++] = alphabet[v >> 18 & 63]; out[n++] = alphabet[v >> 12 & 63]; out[n++] = alphabet[v >> 6 & 63];
	}
	out[n] = '\0';
	return n;
}

static void sign(const char *share, const char *role, long long exp, char *out)
{
	char claims[1024], header_b64[128], claims_b64[1536], sig_b64[64];
	unsigned char mac[EVP_MAX_MD_SIZE];
	unsigned int mac_len = 0;
	const char *header = "{\"alg\":\"HS256\",\"typ\":\"JWT\"}";
	int n = snprintf(claims, sizeof(claims),
		"{\"sub\":\"%s\",\"role\":\"%s\",\"iat\":1,\"exp\":%lld,\"acl\":[{\"permission\":\"allow\",\"action\":\"publish\","
		"\"topic\":\"flare/v1/shares/%s/location/#\"},{\"permission\":\"allow\",\"action\":\"subscribe\",\"topic\":\"flare/v1/shares/%s/status\"}]}",
		share, role, exp, share, share);
	b64url_encode((const unsigned char *)header, strlen(header), header_b64);
	b64url_encode((const unsigned char *)claims, (size_t)n, claims_b64);
	snprintf(out, 4096, "%s.%s", header_b64, claims_b64);
	HMAC(EVP_sha256(), token_key, (int)token_key_len, (const unsigned char *)out, strlen(out), mac, &mac_len);
	b64url_encode(mac, mac_len, sig_b64);
	strcat(out, ".");
	strcat(out, sig_b64);
}

static void exercise_bytes(const unsigned char *data, size_t len)
{
	struct claims c;
	char text[4096];
	unsigned char decoded[4096];
	size_t decoded_len;
	size_t n = len < sizeof(text) - 1 ? len : sizeof(text) - 1;

	(void)parse_header(data, len);
	(void)parse_claims(data, len, &c);
	(void)b64url_decode((const char *)data, len, decoded, sizeof(decoded), &decoded_len);

	memcpy(text, data, n);
	text[n] = '\0';
	(void)verify_token("AAAAAAAAAAAAAAAAAAAAAA", text, 1000, &c);

	{
		struct mosquitto_evt_control ed;
		memset(&ed, 0, sizeof(ed));
		ed.payload = data;
		ed.payloadlen = (uint32_t)len;
		(void)on_control(MOSQ_EVT_CONTROL, &ed, NULL);
	}
	if(n > 1 && strlen(text) == n){
		size_t split = (size_t)(rnd() % n);
		char pattern[4096], filter[4096];
		memcpy(pattern, text, split);
		pattern[split] = '\0';
		memcpy(filter, text + split, n - split + 1);
		if(pattern[0] && filter[0] && mosquitto_sub_topic_check(pattern) == MOSQ_ERR_SUCCESS
				&& mosquitto_sub_topic_check(filter) == MOSQ_ERR_SUCCESS){
			(void)filter_within(pattern, filter);
		}
	}
}

int main(int argc, char **argv)
{
	long iterations = argc > 1 ? atol(argv[1]) : 200000;
	const char *shares[] = { "AAAAAAAAAAAAAAAAAAAAAA", "9jTgdYONYS8zk5dEPCLI6w", "vNDM54NJ8YUA4-AmPOv_Ug" };
	char tokens[3][4096];
	long findings = 0, verified_mutants = 0;

	if(argc > 2) rng_state = strtoull(argv[2], NULL, 10) | 1;
	token_key_len = 32;
	for(size_t i = 0; i < token_key_len; i++) token_key[i] = (unsigned char)(i * 7 + 3);
	if(!grow_clients() || !grow_revocations()) return 2;

	for(int t = 0; t < 3; t++){
		struct claims c;
		sign(shares[t], t == 2 ? "watch" : "device", 4000000000LL, tokens[t]);
		if(verify_token(shares[t], tokens[t], 1000, &c) != V_OK){
			fprintf(stderr, "a valid token did not verify: %s\n", verdict_text(verify_token(shares[t], tokens[t], 1000, &c)));
			return 1;
		}
	}

	for(long i = 0; i < iterations; i++){
		int t = (int)(rnd() % 3);
		char mutant[4200];
		size_t len = strlen(tokens[t]);
		struct claims c;

		memcpy(mutant, tokens[t], len + 1);
		switch(rnd() % 6){
			case 0: mutant[rnd() % len] = (char)(rnd() % 256); break;                     /* any byte */
			case 1: mutant[rnd() % len] = "AQgw-_.Zz09="[rnd() % 12]; break;              /* plausible byte */
			case 2: mutant[rnd() % (len + 1)] = '\0'; break;                              /* truncation */
			case 3: {                                                                      /* insertion */
				size_t at = rnd() % (len + 1);
				memmove(mutant + at + 1, mutant + at, len - at + 1);
				mutant[at] = "A.=\\\"{}"[rnd() % 7];
				break;
			}
			case 4: mutant[len - 1 - rnd() % 2] ^= 1; break;                              /* last signature bits */
			default: {                                                                     /* another token's part */
				const char *other = tokens[(t + 1) % 3];
				size_t cut = rnd() % len, ocut = rnd() % strlen(other);
				snprintf(mutant + cut, sizeof(mutant) - cut, "%s", other + ocut);
				break;
			}
		}
		if(strcmp(mutant, tokens[t]) != 0 && verify_token(shares[t], mutant, 1000, &c) == V_OK){
			verified_mutants++;
			if(findings++ < 5) fprintf(stderr, "a mutated token verified: %s\n", mutant);
		}
		exercise_bytes((const unsigned char *)mutant, strlen(mutant));

		/* Raw random bytes, and the decoded claims of a token with random edits. */
		{
			unsigned char raw[512];
			size_t raw_len = rnd() % sizeof(raw);
			for(size_t k = 0; k < raw_len; k++) raw[k] = (unsigned char)rnd();
			exercise_bytes(raw, raw_len);
		}
		{
			const char *json = "{\"op\":\"revoke\",\"share_id\":\"AAAAAAAAAAAAAAAAAAAAAA\",\"until\":4000000000,\"x\":[1,{\"y\":\"\\u00e9\\ud83d\\ude00\"}]}";
			char edited[512];
			size_t jlen = strlen(json);
			memcpy(edited, json, jlen + 1);
			for(int k = 0; k < 3; k++) edited[rnd() % jlen] = "\"{}[],:\\u0-9 e."[rnd() % 16];
			exercise_bytes((const unsigned char *)edited, jlen);
		}
	}
	printf("flare_auth fuzz: %ld iterations, %ld mutated tokens verified, %zu revocations recorded, %d kicks\n",
	       iterations, verified_mutants, revocation_count, kicks);
	return findings == 0 ? 0 : 1;
}
