//! RoCEv2 (IBTA RC over UDP 4791): codec and go-back-N engine. See spec/rocev2.md.
