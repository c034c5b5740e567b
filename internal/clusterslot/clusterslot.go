// Package clusterslot computes the Redis Cluster hash slot of a key, as
// the Cluster specification defines it. go-redis computes it in an
// internal package; exgate's stores need it to put the keys of one script
// run in one slot.
package clusterslot

import "strings"

// Of returns the hash slot of key: CRC16 (XMODEM) of its hash tag (Tag),
// modulo 16384.
func Of(key string) uint16 {
	key = Tag(key)
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^key[i]]
	}
	return crc & 16383
}

// Tag returns the part of key Redis Cluster hashes to its slot: the text
// between its first "{" and the first "}" after it, when not empty, else
// the whole key. Keys of one tag share a slot.
func Tag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// crc16Table is the table of CRC16-CCITT (XMODEM, polynomial 0x1021).
var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
