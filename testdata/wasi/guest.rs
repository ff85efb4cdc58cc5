// guest.rs: a WASI preview1 command for sandboxd's tests, built with
// Debian's rustc and libstd-rust-dev-wasm32 (make wasi-guests). argv[1]
// picks what it does; the modes match guest.c:
//
//   echo              copy stdin to stdout, then "<n> bytes\n" to stderr
//   args              print each argument after argv[1], one per line
//   env               print the environment, one NAME=value per line
//   cat PATH...       print the files
//   write PATH TEXT   create PATH with TEXT, read it back, print it
//   exit N            exit with status N
//   tick N MS         print "tick <i>" N times, MS milliseconds apart
//   sleep MS          sleep MS milliseconds, then print "woke"
//   hog               grow a vector 1 MiB at a time until the allocator
//                     aborts
use std::io::{Read, Write};
use std::{env, fs, process, thread, time::Duration};

fn main() {
    let args: Vec<String> = env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("");
    let out = std::io::stdout();
    let mut out = out.lock();
    match (mode, &args[2.min(args.len())..]) {
        ("echo", _) => {
            let mut buf = Vec::new();
            std::io::stdin().read_to_end(&mut buf).unwrap();
            out.write_all(&buf).unwrap();
            eprintln!("{} bytes", buf.len());
        }
        ("args", rest) => {
            for a in rest {
                writeln!(out, "{}", a).unwrap();
            }
        }
        ("env", _) => {
            for (k, v) in env::vars() {
                writeln!(out, "{}={}", k, v).unwrap();
            }
        }
        ("cat", paths) => {
            let mut rc = 0;
            for p in paths {
                match fs::read(p) {
                    Ok(b) => out.write_all(&b).unwrap(),
                    Err(e) => {
                        eprintln!("{}: {}", p, e);
                        rc = 1;
                    }
                }
            }
            process::exit(rc);
        }
        ("write", [path, text]) => {
            if let Err(e) = fs::write(path, text) {
                eprintln!("{}: {}", path, e);
                process::exit(1);
            }
            out.write_all(&fs::read(path).unwrap()).unwrap();
        }
        ("exit", [n]) => process::exit(n.parse().unwrap()),
        ("tick", [n, ms]) => {
            let n: u32 = n.parse().unwrap();
            for i in 1..=n {
                writeln!(out, "tick {}", i).unwrap();
                out.flush().unwrap();
                if i < n {
                    thread::sleep(Duration::from_millis(ms.parse().unwrap()));
                }
            }
        }
        ("sleep", [ms]) => {
            thread::sleep(Duration::from_millis(ms.parse().unwrap()));
            writeln!(out, "woke").unwrap();
        }
        ("hog", _) => {
            let mut blocks: Vec<Vec<u8>> = Vec::new();
            loop {
                blocks.push(vec![1u8; 1 << 20]);
            }
        }
        _ => {
            eprintln!("usage: guest echo|args|env|cat|write|exit|tick|sleep|hog ...");
            process::exit(2);
        }
    }
}
